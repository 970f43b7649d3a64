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

// Entries with nothing left may stay in their shard as zeros (update keeps
// up to idleKeep, to spare Go's map a reseed per release). A zero entry
// must read as an absent one: no hold, no abandoned wait, no freeze; and a
// stale probe count left in it must not refuse a later waiter's promote.
// The shard stays bounded however many entries pass through it.
func TestIdleEntriesReadAsAbsent(t *testing.T) {
	var h holdTable
	const e = 5
	h.add(e, 1, 0)
	mark := h.wait(e)
	h.probe(e) // counts a probe, starts a freeze
	if ok, now, _ := h.promote(e, mark); ok {
		t.Fatal("promote after a probe was not refused")
	} else if ok, _, _ := h.promote(e, now); !ok {
		t.Fatal("promote with the current mark refused")
	}
	h.add(e, -1, 0) // released

	if got := h.probe(e); got != rdma.HoldNone {
		t.Fatalf("a released entry answered %v", got)
	}
	if h.abandoning(e) {
		t.Fatal("a released entry reads as abandoning")
	}
	h.add(e, 1, 0)
	if ok, _, _ := h.promote(e, h.wait(e)); !ok {
		t.Fatal("a new waiter on a kept entry was refused")
	}
	h.add(e, -1, 0)

	const shards = 64
	for i := uint64(0); i < 100; i++ {
		x := e + i*shards // all in e's shard
		h.add(x, 1, 0)
		h.add(x, -1, 0)
	}
	if n := len(h.shards[e%shards].m); n > idleKeep {
		t.Fatalf("a shard kept %d idle entries, more than %d", n, idleKeep)
	}
	for i := uint64(0); i < 100; i++ {
		if got := h.probe(e + i*shards); got != rdma.HoldNone {
			t.Fatalf("released entry %d answered %v", e+i*shards, got)
		}
	}
}
