package shiftlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// TestReaderCountNeverWraps: RdrCnt has 23 bits. One reader more than it
// holds carried it to zero: the entry then read as free with 8,388,608
// readers inside, a writer was granted among them, and their releases
// borrowed the count back to its top, where it stayed. A careless client
// gets there by leaking shared holds with a long TTL (100 a second for a
// day). A reader that finds the count at the limit must back out, refused,
// leaving the count and the exclusion as they were.
func TestReaderCountNeverWraps(t *testing.T) {
	cl := newCluster(t, 2, 16, shiftlock.Config{})
	a, b := cl.clients[0], cl.clients[1]
	ctx := ctxT(t)
	const entry = 5
	ep := cl.eps[0]
	rdr := rdma.NewField(40, 23)
	// Readers that hold entry 5 and never let go, one short of the top.
	top := uint64(1)<<23 - 1
	if _, err := ep.MaskedFAA128(ctx, ep.Layout().EntryAddr(entry), rdr.Value(top-1), rdma.Boundary(rdr)); err != nil {
		t.Fatal(err)
	}
	var granted []*shiftlock.Guard
	for i := 0; i < 3; i++ {
		g, err := a.AcquireShared(ctx, entry)
		switch {
		case err == nil:
			granted = append(granted, g)
		case !strings.Contains(err.Error(), "readers"):
			t.Fatalf("shared acquire %d: %v, want a refusal that names the readers", i, err)
		}
		g2, ok, err := b.TryShared(ctx, entry)
		switch {
		case ok:
			granted = append(granted, g2)
		case err != nil && !strings.Contains(err.Error(), "readers"):
			t.Fatalf("shared try %d: %v, want a refusal that names the readers", i, err)
		}
		e, err := a.Read(ctx, entry)
		if err != nil {
			t.Fatal(err)
		}
		if e.Readers() < top-1 {
			t.Fatalf("after %d more readers the entry counts %d (%v): RdrCnt wrapped", len(granted), e.Readers(), e)
		}
		if g, ok, _ := b.TryExclusive(ctx, entry); ok {
			g.Release(ctx)
			t.Fatalf("a writer was granted with %d readers inside (%v)", top-1+uint64(len(granted)), e)
		}
	}
	for _, g := range granted {
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if e, _ := a.Read(ctx, entry); e.Readers() != top-1 {
		t.Fatalf("after the releases the entry counts %d readers, want %d", e.Readers(), top-1)
	}
}

// TestReaderBacksOutBehindAWriter: a reader that finds the count at the
// limit while a writer holds the entry is refused at once, but stays
// counted until its epoch comes (leaving earlier could let a later writer
// in while an older reader still holds); then it releases by itself.
func TestReaderBacksOutBehindAWriter(t *testing.T) {
	cl := newCluster(t, 2, 16, shiftlock.Config{})
	a, b := cl.clients[0], cl.clients[1]
	ctx := ctxT(t)
	const entry = 6
	w, err := a.AcquireExclusive(ctx, entry)
	if err != nil {
		t.Fatal(err)
	}
	ep := cl.eps[0]
	rdr := rdma.NewField(40, 23)
	// Readers waiting behind the writer, as many as the limit allows.
	if _, err := ep.MaskedFAA128(ctx, ep.Layout().EntryAddr(entry), rdr.Value(shiftlock.MaxReaders), rdma.Boundary(rdr)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquireShared(ctx, entry); !errors.Is(err, shiftlock.ErrTooManyReaders) {
		t.Fatalf("shared acquire behind a writer at the limit: %v, want ErrTooManyReaders", err)
	}
	if e, _ := a.Read(ctx, entry); e.Readers() != shiftlock.MaxReaders+1 {
		t.Fatalf("the refused reader left before its epoch: %v", e)
	}
	before, _ := a.Read(ctx, entry)
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		e, err := a.Read(ctx, entry)
		if err != nil {
			t.Fatal(err)
		}
		if e.Readers() == shiftlock.MaxReaders && e.RelCnt() > before.RelCnt()+1 {
			break // the writer's release, then the refused reader's
		}
		if ctx.Err() != nil {
			t.Fatalf("the refused reader never released: %v", e)
		}
		time.Sleep(time.Millisecond)
	}
}
