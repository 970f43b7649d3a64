package baseline_test

import (
	"testing"

	"github.com/shiftlock/shiftlock-proxy/bench/shiftlock/baseline"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// TestMCSHandover: uncontended, acquire and release are one masked CAS
// each; a waiter on another node costs one masked CAS and one Send
// (Successor), and the holder hands over with one Send and no atomic.
func TestMCSHandover(t *testing.T) {
	cl := newCluster(t, 2, 4)
	ctx := ctxT(t)
	a, b := baseline.NewMCS(cl.eps[0]), baseline.NewMCS(cl.eps[1])
	var g shiftlock.Grant
	var err error
	d := delta(cl.eps[0], func() { g, err = a.Acquire(ctx, 3, shiftlock.Exclusive) })
	if err != nil {
		t.Fatal(err)
	}
	if d.Out[rdma.VerbMaskedCAS] != 1 || d.OutAtomics() != 1 || d.Out[rdma.VerbSend] != 0 {
		t.Fatalf("uncontended acquire: %d masked CAS, %d atomics, %d sends", d.Out[rdma.VerbMaskedCAS], d.OutAtomics(), d.Out[rdma.VerbSend])
	}
	d = delta(cl.eps[0], func() { err = g.Release(ctx) })
	if err != nil {
		t.Fatal(err)
	}
	if d.Out[rdma.VerbMaskedCAS] != 1 || d.OutAtomics() != 1 || d.Out[rdma.VerbSend] != 0 {
		t.Fatalf("uncontended release: %d masked CAS, %d sends", d.Out[rdma.VerbMaskedCAS], d.Out[rdma.VerbSend])
	}
	if w := cl.word(t, 3); w != 0 {
		t.Fatalf("free entry holds %#x", w)
	}

	if g, err = a.Acquire(ctx, 3, shiftlock.Shared); err != nil {
		t.Fatal(err)
	}
	before := cl.eps[1].Counters().Snapshot()
	got := make(chan shiftlock.Grant)
	go func() {
		g, err := b.Acquire(ctx, 3, shiftlock.Shared)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	eventually(t, ctx, "successor announces itself", func() bool { return b.Stats().RemoteSends.Load() == 1 })
	d = delta(cl.eps[0], func() { err = g.Release(ctx) })
	if err != nil {
		t.Fatal(err)
	}
	if d.OutAtomics() != 0 || d.Out[rdma.VerbSend] != 1 {
		t.Fatalf("handover: %d atomics, %d sends; want one Send", d.OutAtomics(), d.Out[rdma.VerbSend])
	}
	g2 := <-got
	if d := cl.eps[1].Counters().Snapshot().Sub(before); d.OutAtomics() != 1 || d.Out[rdma.VerbSend] != 1 {
		t.Fatalf("queued acquire: %d atomics, %d sends; want one of each", d.OutAtomics(), d.Out[rdma.VerbSend])
	}
	if err := g2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if w := cl.word(t, 3); w != 0 {
		t.Fatalf("free entry holds %#x", w)
	}
	if a.Stats().Handovers.Load() != 1 || a.Stats().Grants.Load() != 2 || b.Stats().Grants.Load() != 1 {
		t.Fatalf("handovers %d, grants %d and %d", a.Stats().Handovers.Load(), a.Stats().Grants.Load(), b.Stats().Grants.Load())
	}
}

// TestMCSLocalHandover: both ends on one node hand over in-process, with no
// fabric Send.
func TestMCSLocalHandover(t *testing.T) {
	cl := newCluster(t, 1, 1)
	ctx := ctxT(t)
	m := baseline.NewMCS(cl.eps[0])
	g, err := m.Acquire(ctx, 0, shiftlock.Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan shiftlock.Grant)
	go func() {
		g, err := m.Acquire(ctx, 0, shiftlock.Exclusive)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	eventually(t, ctx, "successor announces itself", func() bool { return m.Stats().LocalSends.Load() == 1 })
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g2 := <-got
	if err := g2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if s := cl.eps[0].Counters().Snapshot(); s.Out[rdma.VerbSend] != 0 || m.Stats().LocalSends.Load() != 2 {
		t.Fatalf("fabric sends %d, local %d; want 0 and 2", s.Out[rdma.VerbSend], m.Stats().LocalSends.Load())
	}
}
