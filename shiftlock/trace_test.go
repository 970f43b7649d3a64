package shiftlock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// TestTraceReportsPhases: an uncontended writer reports its initial atomic
// and its release atomic; a writer queued behind it also its notification
// and its wait for the handover; a reader behind a writer its wait for the
// writers (Table 2's items).
func TestTraceReportsPhases(t *testing.T) {
	var mu sync.Mutex
	seen := map[shiftlock.Phase]int{}
	cfg := shiftlock.Config{Trace: func(p shiftlock.Phase, d time.Duration) {
		if d < 0 {
			t.Errorf("%v took %v", p, d)
		}
		mu.Lock()
		seen[p]++
		mu.Unlock()
	}}
	cl := newCluster(t, 2, 8, cfg)
	ctx := ctxT(t)
	a, b := cl.clients[0], cl.clients[1]
	g, err := a.AcquireExclusive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 2)
	go func() {
		g2, err := b.AcquireExclusive(ctx, 1)
		if err == nil {
			err = g2.Release(ctx)
		}
		got <- err
	}()
	for {
		e, _ := a.Read(ctx, 1)
		if e.Tail().Node == cl.eps[1].Node() {
			break
		}
		time.Sleep(time.Millisecond)
	}
	go func() {
		r, err := b.AcquireShared(ctx, 1)
		if err == nil {
			err = r.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range []shiftlock.Phase{shiftlock.PhaseWriterIA, shiftlock.PhaseWriterNP, shiftlock.PhaseWriterWP,
		shiftlock.PhaseReaderIA, shiftlock.PhaseReaderWW, shiftlock.PhaseReleaseIA, shiftlock.PhaseReleaseNS} {
		if seen[p] == 0 {
			t.Errorf("phase %v never reported (saw %v)", p, seen)
		}
	}
}
