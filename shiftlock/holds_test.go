package shiftlock

import (
	"testing"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// A waiter that a probe found waiting cannot become the holder on the
// strength of what it knew before the probe: promote refuses until it has
// taken the probe's count as its new mark (after re-reading the entry,
// Client.enter), and once promoted it answers "active", which makes the
// memory node refuse a reset. Without a probe, promote moves it at once.
func TestPromoteAfterProbe(t *testing.T) {
	var h holdTable
	const e = 7
	h.add(e, 1, 0) // the acquire's atomic is posted
	mark := h.wait(e)
	if got := h.probe(e); got != rdma.HoldWaiting {
		t.Fatalf("a waiter answered %v", got)
	}
	ok, now, freeze := h.promote(e, mark)
	if ok || now == mark || freeze <= 0 || freeze > rdma.ProbeFreeze {
		t.Fatalf("promote after a probe: ok %v, mark %d -> %d, freeze %v", ok, mark, now, freeze)
	}
	if got := h.probe(e); got != rdma.HoldWaiting {
		t.Fatalf("a refused promote left the waiter answering %v", got)
	}
	if ok, again, _ := h.promote(e, now); ok {
		t.Fatalf("a second probe (mark %d -> %d) did not refuse", now, again)
	} else {
		now = again
	}
	if ok, _, _ := h.promote(e, now); !ok {
		t.Fatal("promote with the current mark refused")
	}
	if got := h.probe(e); got != rdma.HoldActive {
		t.Fatalf("the holder answered %v", got)
	}

	const f = 8
	h.add(f, 1, 0)
	if ok, _, _ := h.promote(f, h.wait(f)); !ok {
		t.Fatal("promote without a probe refused")
	}
	if got := h.probe(f); got != rdma.HoldActive {
		t.Fatalf("the holder answered %v", got)
	}
}
