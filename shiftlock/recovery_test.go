package shiftlock_test

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
	"github.com/shiftlock/shiftlock-proxy/shiftlock/locktest"
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

// heldSends is an endpoint whose Sends wait, once hold is called, until
// deliver is: a handover that is slow to cross the network.
type heldSends struct {
	rdma.Endpoint
	mu   sync.Mutex
	gate chan struct{} // nil: Sends go through
}

func (h *heldSends) hold() {
	h.mu.Lock()
	h.gate = make(chan struct{})
	h.mu.Unlock()
}

func (h *heldSends) deliver() {
	h.mu.Lock()
	close(h.gate)
	h.gate = nil
	h.mu.Unlock()
}

func (h *heldSends) Send(ctx context.Context, to rdma.NodeID, tg rdma.Target, p rdma.Payload) error {
	h.mu.Lock()
	gate := h.gate
	h.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return h.Endpoint.Send(ctx, to, tg, p)
}

// A Handover still crossing the network when the memory node probes has
// no holder behind it: its sender has released (it answers "none") and its
// receiver only waits (it answers "waiting"). The entry is reset, a new
// writer takes it, and the Handover, arriving after the reset, must not
// grant the lock a second time with a token from before the leap. This is
// what TestVerbsMutualExclusion/heavy hit on soft-RoCE under TCG (issue
// 36): handovers took milliseconds, and a waiter behind the receiver asked
// for a stale-entry recovery in between.
func TestHandoverInFlightDuringRecovery(t *testing.T) {
	host := memnode.New(memnode.Config{Entries: 16, DeadAfter: time.Hour})
	t.Cleanup(host.Close)
	fab := memfab.New(host)
	join := func(cfg shiftlock.Config, wrap func(rdma.Endpoint) rdma.Endpoint) *shiftlock.Client {
		ep, err := fab.Join("node")
		if err != nil {
			t.Fatal(err)
		}
		return shiftlock.NewClient(wrap(ep), cfg)
	}
	same := func(ep rdma.Endpoint) rdma.Endpoint { return ep }
	var slow *heldSends
	a := join(shiftlock.Config{}, func(ep rdma.Endpoint) rdma.Endpoint { slow = &heldSends{Endpoint: ep}; return slow })
	// b's own failure checks never come due in this test: the Handover
	// reaches it before they would, as it did under TCG.
	b := join(shiftlock.Config{CheckInterval: time.Hour}, same)
	c := join(shiftlock.Config{}, same)
	ctx := ctxT(t)
	chk := locktest.NewChecker(1)
	const entry = 0

	ga, err := a.AcquireExclusive(ctx, entry)
	if err != nil {
		t.Fatal(err)
	}
	chk.Enter(entry, false, ga.Token(), chk.Ask(entry))
	type result struct {
		g   *shiftlock.Guard
		err error
	}
	bres := make(chan result, 1)
	ticketB := chk.Ask(entry)
	go func() {
		g, err := b.AcquireExclusive(ctx, entry)
		bres <- result{g, err}
	}()
	for !ga.SuccessorKnown() {
		if ctx.Err() != nil {
			t.Fatal("b never queued behind a")
		}
		time.Sleep(time.Millisecond)
	}
	// a hands over to b; the Handover is on its way.
	slow.hold()
	chk.Exit(entry, false)
	if err := ga.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A waiter asks for recovery: a has released and b waits, so the
	// memory node resets the entry.
	var era [8]byte
	if err := c.Endpoint().Read(ctx, c.Endpoint().Layout().EraAddr(entry), era[:]); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Endpoint().Control().Recover(ctx, rdma.RecoverRequest{Entry: entry, Era: binary.LittleEndian.Uint64(era[:])})
	if err != nil || rep.Status != rdma.RecoverDone {
		t.Fatalf("recovery: %+v, %v", rep, err)
	}
	gc, err := c.AcquireExclusive(ctx, entry)
	if err != nil {
		t.Fatal(err)
	}
	chk.Enter(entry, false, gc.Token(), chk.Ask(entry))
	slow.deliver()
	// b either takes the stale Handover (the defect) or sees the reset
	// and queues behind c.
	var gb *shiftlock.Guard
	for gb == nil && !gc.SuccessorKnown() {
		select {
		case r := <-bres:
			if r.err != nil {
				t.Fatal(r.err)
			}
			gb = r.g
			chk.Enter(entry, false, gb.Token(), ticketB)
			t.Fatalf("b was granted the lock c holds (tokens: b %d, c %d): %v", gb.Token(), gc.Token(), chk.Report())
		case <-ctx.Done():
			t.Fatal("b neither took the lock nor queued behind c")
		case <-time.After(time.Millisecond):
		}
	}
	chk.Exit(entry, false)
	if err := gc.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-bres
	if r.err != nil {
		t.Fatal(r.err)
	}
	chk.Enter(entry, false, r.g.Token(), ticketB)
	chk.Exit(entry, false)
	if err := r.g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v := chk.Violations(); v != 0 {
		t.Fatalf("%d violations: %v", v, chk.Report())
	}
	if r.g.Token() <= gc.Token() {
		t.Fatalf("b's token %d is not above c's %d", r.g.Token(), gc.Token())
	}
	if n := b.Stats().Resets.Load(); n != 1 {
		t.Fatalf("b restarted %d times, want once (after the reset)", n)
	}
	if n := b.Stats().Rechecks.Load(); n != 1 {
		t.Fatalf("b re-read the entry for %d grants, want 1 (the stale Handover)", n)
	}
}
