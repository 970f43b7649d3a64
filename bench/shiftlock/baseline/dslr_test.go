package baseline_test

import (
	"sync"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/bench/shiftlock/baseline"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// dslrWord builds {nX, nS, maxX, maxS} as DSLR Fig. 3 lays it out.
func dslrWord(nX, nS, maxX, maxS uint64) uint64 { return nX<<48 | nS<<32 | maxX<<16 | maxS }

// TestDSLRTickets walks the bakery: one FAA to acquire and one to release
// when uncontended, readers share, a writer waits for the readers ahead of
// it and a reader for the writer ahead of it, with the word's counters
// exactly where the paper puts them.
func TestDSLRTickets(t *testing.T) {
	cl := newCluster(t, 3, 4)
	ctx := ctxT(t)
	l := make([]*baseline.DSLR, 3)
	for i := range l {
		l[i] = baseline.NewDSLR(cl.eps[i], baseline.DSLRConfig{Lease: time.Minute})
	}
	var r1, r2 shiftlock.Grant
	var err error
	d := delta(cl.eps[0], func() { r1, err = l[0].Acquire(ctx, 2, shiftlock.Shared) })
	if err != nil {
		t.Fatal(err)
	}
	if d.Out[rdma.VerbFAA] != 1 || d.OutAtomics() != 1 || d.Out[rdma.VerbRead] != 0 {
		t.Fatalf("uncontended shared acquire: %d FAA, %d atomics, %d reads", d.Out[rdma.VerbFAA], d.OutAtomics(), d.Out[rdma.VerbRead])
	}
	if r2, err = l[1].Acquire(ctx, 2, shiftlock.Shared); err != nil {
		t.Fatal(err)
	}
	if w := cl.word(t, 2); w != dslrWord(0, 0, 0, 2) {
		t.Fatalf("two readers: word %#x", w)
	}
	// A writer queues behind both readers.
	wgot := make(chan shiftlock.Grant)
	go func() {
		g, err := l[2].Acquire(ctx, 2, shiftlock.Exclusive)
		if err != nil {
			t.Error(err)
		}
		wgot <- g
	}()
	eventually(t, ctx, "writer takes its ticket", func() bool { return cl.word(t, 2) == dslrWord(0, 0, 1, 2) })
	d = delta(cl.eps[0], func() { err = r1.Release(ctx) })
	if err != nil {
		t.Fatal(err)
	}
	if d.Out[rdma.VerbFAA] != 1 || d.OutAtomics() != 1 {
		t.Fatalf("release: %d FAA, %d atomics", d.Out[rdma.VerbFAA], d.OutAtomics())
	}
	select {
	case <-wgot:
		t.Fatal("writer entered with a reader inside")
	case <-time.After(20 * time.Millisecond):
	}
	// A reader arriving now queues behind the writer.
	rgot := make(chan shiftlock.Grant)
	go func() {
		g, err := l[0].Acquire(ctx, 2, shiftlock.Shared)
		if err != nil {
			t.Error(err)
		}
		rgot <- g
	}()
	eventually(t, ctx, "late reader takes its ticket", func() bool { return cl.word(t, 2) == dslrWord(0, 1, 1, 3) })
	if err := r2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-wgot
	select {
	case <-rgot:
		t.Fatal("reader entered with a writer inside")
	case <-time.After(20 * time.Millisecond):
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r3 := <-rgot
	if err := r3.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if w := cl.word(t, 2); w != dslrWord(1, 3, 1, 3) {
		t.Fatalf("after every release: word %#x", w)
	}
	var grants uint64
	for _, x := range l {
		grants += x.Stats().Grants.Load()
	}
	if grants != 4 {
		t.Fatalf("%d grants, want 4", grants)
	}
}

// TestDSLROverflowReset: the holder of ticket COUNT_MAX-1 zeroes the word on
// release, in either mode.
func TestDSLROverflowReset(t *testing.T) {
	for _, m := range []shiftlock.Mode{shiftlock.Exclusive, shiftlock.Shared} {
		cl := newCluster(t, 1, 1)
		ctx := ctxT(t)
		l := baseline.NewDSLR(cl.eps[0], baseline.DSLRConfig{CountMax: 4, Lease: time.Minute})
		for round := 1; round <= 3; round++ {
			for i := 1; i <= 4; i++ {
				g, err := l.Acquire(ctx, 0, m)
				if err != nil {
					t.Fatal(err)
				}
				if err := g.Release(ctx); err != nil {
					t.Fatal(err)
				}
				want := uint64(i)
				if i == 4 {
					want = 0
				}
				var wantWord uint64
				if m == shiftlock.Exclusive {
					wantWord = dslrWord(want, 0, want, 0)
				} else {
					wantWord = dslrWord(0, want, 0, want)
				}
				if w := cl.word(t, 0); w != wantWord {
					t.Fatalf("%v round %d after grant %d: word %#x, want %#x", m, round, i, w, wantWord)
				}
			}
			if n := l.Stats().OverflowResets.Load(); n != uint64(round) {
				t.Fatalf("%v: %d overflow resets after round %d", m, n, round)
			}
		}
	}
}

// TestDSLRLeaseReset: a holder that never releases (a crashed client) is
// passed over once the counters have stood still for twice the lease, both
// by a waiter with a ticket and, when the dead holder was the one to reset
// a full word, by a newcomer.
func TestDSLRLeaseReset(t *testing.T) {
	// A holder whose lease ran out skips its release (DSLR's rule), so the
	// lease must outlast any scheduling stall between a grant and its
	// release here, or a live holder counts as dead.
	const lease = 250 * time.Millisecond
	t.Run("waiter", func(t *testing.T) {
		cl := newCluster(t, 2, 1)
		ctx := ctxT(t)
		a := baseline.NewDSLR(cl.eps[0], baseline.DSLRConfig{Lease: lease})
		b := baseline.NewDSLR(cl.eps[1], baseline.DSLRConfig{Lease: lease})
		if _, err := a.Acquire(ctx, 0, shiftlock.Exclusive); err != nil {
			t.Fatal(err)
		}
		g, err := b.Acquire(ctx, 0, shiftlock.Exclusive)
		if err != nil {
			t.Fatal(err)
		}
		if n := b.Stats().LeaseResets.Load(); n != 1 {
			t.Fatalf("%d lease resets, want 1", n)
		}
		// The reset moved nX past the dead ticket (0) and b's first (1);
		// b's second ticket is 2.
		if w := cl.word(t, 0); w != dslrWord(2, 0, 3, 0) {
			t.Fatalf("word %#x after the reset", w)
		}
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("full-word", func(t *testing.T) {
		cl := newCluster(t, 2, 1)
		ctx := ctxT(t)
		a := baseline.NewDSLR(cl.eps[0], baseline.DSLRConfig{Lease: lease, CountMax: 2})
		b := baseline.NewDSLR(cl.eps[1], baseline.DSLRConfig{Lease: lease, CountMax: 2})
		g, err := a.Acquire(ctx, 0, shiftlock.Exclusive)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// a takes the last ticket and dies holding it: the word stays full.
		if _, err := a.Acquire(ctx, 0, shiftlock.Exclusive); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := b.Acquire(ctx, 0, shiftlock.Shared)
			if err != nil {
				t.Error(err)
				return
			}
			if err := g.Release(ctx); err != nil {
				t.Error(err)
			}
		}()
		wg.Wait()
		if n := b.Stats().LeaseResets.Load(); n != 1 {
			t.Fatalf("%d lease resets, want 1", n)
		}
		if b.Stats().FullBackoffs.Load() == 0 {
			t.Fatal("the newcomer never found the word full")
		}
		if w := cl.word(t, 0); w != dslrWord(0, 1, 0, 1) {
			t.Fatalf("word %#x after reset and one shared grant", w)
		}
	})
}
