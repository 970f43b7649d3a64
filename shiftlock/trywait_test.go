package shiftlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/shiftlock"
	"github.com/shiftlock/shiftlock-proxy/shiftlock/locktest"
)

// tryWaiter is a shiftlock.Locker whose exclusive acquisitions wait as an
// event loop does: EnqueueExclusive, then TryWait whenever Notify says a
// message came, and Wait only when TryWait says it must, or by WakeAt.
// Shared acquisitions use the blocking API, so that writers meet mode
// changes.
type tryWaiter struct {
	c                  *shiftlock.Client
	granted, fallbacks atomic.Int64
}

func (l *tryWaiter) Entries() uint64 { return l.c.Entries() }

func (l *tryWaiter) Acquire(ctx context.Context, entry uint64, m shiftlock.Mode) (shiftlock.Grant, error) {
	return l.AcquireHooked(ctx, entry, m, shiftlock.Hooks{})
}

// AcquireHooked makes tryWaiter a HookedLocker, so that the checker
// measures waits from the arrival of the enqueuing atomic: measured from
// the call, a reader descheduled before its atomic counts writers that
// came before it as writers it waited through.
func (l *tryWaiter) AcquireHooked(ctx context.Context, entry uint64, m shiftlock.Mode, h shiftlock.Hooks) (shiftlock.Grant, error) {
	if m == shiftlock.Shared {
		return l.c.AcquireSharedHooked(ctx, entry, h)
	}
	g, s, err := l.c.EnqueueExclusive(entry, 0)
	if err != nil {
		return nil, err
	}
	if h.Arrived != nil {
		h.Arrived()
	}
	if g != nil {
		return g, nil
	}
	poke := make(chan struct{}, 1)
	if s.Notify(func() {
		select {
		case poke <- struct{}{}:
		default:
		}
	}) {
		for {
			g, granted, must := s.TryWait()
			if granted {
				l.granted.Add(1)
				return g, nil
			}
			if must {
				break
			}
			t := time.NewTimer(time.Until(s.WakeAt()))
			select {
			case <-poke:
				t.Stop()
				continue
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			break
		}
		s.Notify(nil)
	}
	l.fallbacks.Add(1)
	g, err = s.Wait(ctx, h)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// TestTryWaitMutualExclusion runs the checker with every queued exclusive
// acquisition waited for without blocking (Start.TryWait), next to blocking
// shared ones: handovers are taken by TryWait, mode changes left to Wait.
func TestTryWaitMutualExclusion(t *testing.T) {
	const threshold = 4
	cl := newCluster(t, 3, 8, shiftlock.Config{Threshold: threshold})
	var ls []shiftlock.Locker
	var tws []*tryWaiter
	for _, c := range cl.clients {
		tw := &tryWaiter{c: c}
		tws = append(tws, tw)
		ls = append(ls, tw)
	}
	res := checkFewEntries(t, cl, locktest.Workload{Clients: ls, Workers: 90, Entries: 4, ReadRatio: 0.3, Ops: 150, Seed: 11}, threshold+1)
	var granted, fallbacks int64
	for _, tw := range tws {
		granted += tw.granted.Load()
		fallbacks += tw.fallbacks.Load()
	}
	t.Logf("%d ops; TryWait granted %d, Wait finished %d", res.Ops, granted, fallbacks)
	if granted == 0 || fallbacks == 0 {
		t.Fatalf("TryWait granted %d and Wait finished %d: the workload must exercise both", granted, fallbacks)
	}
}

// TestTryWaitLeavesAModeChangeToWait: a writer queued behind a writer that
// lets readers in gets a ModeChanged, which TryWait leaves to Wait; Wait
// takes the message TryWait took, and grants once the readers are gone.
func TestTryWaitLeavesAModeChangeToWait(t *testing.T) {
	cl := newCluster(t, 1, 4, shiftlock.Config{})
	c := cl.clients[0]
	ctx := ctxT(t)
	g1, err := c.Acquire(ctx, 0, shiftlock.Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	// A reader queues behind the writer, then a second writer behind it.
	rd := make(chan shiftlock.Grant, 1)
	go func() {
		g, err := c.Acquire(ctx, 0, shiftlock.Shared)
		if err != nil {
			t.Error(err)
		}
		rd <- g
	}()
	for e, _ := c.Read(ctx, 0); e.Readers() == 0; e, _ = c.Read(ctx, 0) {
		time.Sleep(time.Millisecond)
	}
	g2, s, err := c.EnqueueExclusive(0, 0)
	if err != nil || g2 != nil || s == nil {
		t.Fatalf("second writer: %v %v %v", g2, s, err)
	}
	poke := make(chan struct{}, 1)
	if !s.Notify(func() { poke <- struct{}{} }) {
		t.Fatal("a queued writer cannot be notified")
	}
	if _, granted, must := s.TryWait(); granted || must {
		t.Fatalf("TryWait before any message: granted %v, must wait %v", granted, must)
	}
	if err := g1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-rd
	// The first writer's release let the reader in; the second writer is
	// told, and must wait for the reader (Wait).
	select {
	case <-poke:
	case <-time.After(time.Minute):
		t.Fatal("no notification of the release")
	}
	if _, granted, must := s.TryWait(); granted || !must {
		t.Fatalf("TryWait on a mode change: granted %v, must wait %v; want false, true", granted, must)
	}
	got := make(chan *shiftlock.Guard, 1)
	go func() {
		g, err := s.Wait(ctx, shiftlock.Hooks{})
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	select {
	case <-got:
		t.Fatal("the writer was granted while a reader holds the lock")
	case <-time.After(20 * time.Millisecond):
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-got
	if g == nil {
		t.Fatal("no grant after the reader left")
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if e, _ := c.Read(ctx, 0); !e.Free() {
		t.Fatalf("entry left %v", e)
	}
}
