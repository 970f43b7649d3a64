package shiftlock_test

import (
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// A waiter refused for a while (the holder alive) backs off; once the holder
// is dead, the memory node names the exact end of its horizon, and the waiter
// asks right then, not when its backoff, by then longer than the horizon's
// rest, would have it ask.
func TestWaiterAsksAtTheDeadHorizonsEnd(t *testing.T) {
	const horizon = time.Second
	host := memnode.New(memnode.Config{Entries: 16, HeartbeatInterval: 20 * time.Millisecond, DeadAfter: 200 * time.Millisecond})
	t.Cleanup(host.Close)
	fab := memfab.New(host)
	cfg := shiftlock.Config{CheckInterval: 50 * time.Millisecond, StaleAfter: 100 * time.Millisecond}
	var cs []*shiftlock.Client
	var hbs []*rdma.Heartbeat
	for _, h := range []time.Duration{horizon, 0} {
		ep, err := fab.Join("node")
		if err != nil {
			t.Fatal(err)
		}
		hb := rdma.StartHeartbeat(ep, func() time.Duration { return h }, nil)
		t.Cleanup(hb.Stop)
		hbs = append(hbs, hb)
		cs = append(cs, shiftlock.NewClient(ep, cfg))
	}
	ctx := ctxT(t)
	if _, err := cs[0].AcquireExclusive(ctx, 3); err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		if _, err := cs[1].AcquireExclusive(ctx, 3); err != nil {
			t.Error(err)
		}
		got <- time.Now()
	}()
	// While the holder lives, the waiter's requests are refused and its
	// backoff grows (to 50 ms << 5 = 1.6 s after five refusals).
	time.Sleep(1600 * time.Millisecond)
	hbs[0].Stop()
	at, h := hbs[0].Published()
	end := at.Add(h)
	select {
	case g := <-got:
		// The memory node reads the last beat within a sweep, stretches it
		// by its drift allowance, and the recovery takes a few verbs.
		late := g.Sub(end)
		if late > 300*time.Millisecond {
			t.Fatalf("granted %v after the dead holder's horizon ended", late.Round(time.Millisecond))
		}
		t.Logf("granted %v after the dead holder's horizon ended", late.Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was never granted the dead holder's lock")
	}
}
