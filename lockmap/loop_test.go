package lockmap_test

import (
	"errors"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/lockmap/maptest"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// TestLoopOnInlineMap: seen from an event loop (Loop), an in-process map
// completes what needs no wait and refuses, leaving nothing held, what
// would queue.
func TestLoopOnInlineMap(t *testing.T) {
	a, b := embeddedPair(t)
	c := ctx(t)
	la, lb := a.Loop(nil), b.Loop(nil)
	if !a.Inline() {
		t.Fatal("a memfab map must be inline")
	}
	if _, ok, err := la.Acquire(c, []string{"k"}, "t1", excl(time.Minute, time.Second)); !ok || err != nil {
		t.Fatalf("free key on the loop: %v %v", ok, err)
	}
	// Held, with a wait budget: would queue.
	if _, ok, err := la.Acquire(c, []string{"k"}, "t2", excl(time.Minute, time.Second)); ok || !errors.Is(err, lockmap.ErrWouldBlock) {
		t.Fatalf("held key with a budget on the loop: ok=%v err=%v, want ErrWouldBlock", ok, err)
	}
	// Held, try-only: a plain "not acquired".
	if _, ok, err := la.Acquire(c, []string{"k"}, "t2", excl(time.Minute, 0)); ok || err != nil {
		t.Fatalf("held key, try-only, on the loop: ok=%v err=%v", ok, err)
	}
	// The refused waits left nothing behind: releasing frees the key for
	// another proxy at once.
	if !a.Release("k", "t1") {
		t.Fatal("release")
	}
	if _, ok, err := lb.Acquire(c, []string{"k"}, "t3", excl(time.Minute, 0)); !ok || err != nil {
		t.Fatalf("after release: %v %v", ok, err)
	}
	if in, err := la.Lookup(c, "k"); err != nil || in.State != lockmap.HeldElsewhere {
		t.Fatalf("lookup on the loop: %+v %v", in, err)
	}
	if _, _, err := la.RangeAcquire(c, "r", "t", 0, 1, 0, time.Minute, 0); !errors.Is(err, lockmap.ErrWouldBlock) {
		t.Fatalf("a range acquire on the loop: %v, want ErrWouldBlock", err)
	}
}

// embeddedPair is two maps without owner tags on one in-process memory
// node, as embedded proxies run.
func embeddedPair(t *testing.T) (*lockmap.Map, *lockmap.Map) {
	host := memnode.New(memnode.Config{Entries: 1 << 12, DeadAfter: 30 * time.Second})
	t.Cleanup(host.Close)
	fab := memfab.New(host)
	mk := func(name string) *lockmap.Map {
		ep, err := fab.Join(name)
		if err != nil {
			t.Fatal(err)
		}
		m := lockmap.New([]*lockmap.Domain{{Name: "mem", Client: shiftlock.NewClient(ep, shiftlock.Config{})}}, lockmap.Config{})
		t.Cleanup(m.Close)
		return m
	}
	return mk("p1"), mk("p2")
}

// TestLoopOnNetworkMap: a map on a memnode process is not inline, and
// every lock operation on its Loop is refused before any verb.
func TestLoopOnNetworkMap(t *testing.T) {
	m, ep := maptest.Network(t, shiftlock.Config{})
	if m.Inline() {
		t.Fatal("a tcpfab map must not be inline")
	}
	before := ep.Counters().Snapshot()
	lp := m.Loop(nil)
	if _, _, err := lp.Acquire(ctx(t), []string{"k"}, "t", excl(time.Minute, 0)); !errors.Is(err, lockmap.ErrWouldBlock) {
		t.Fatalf("acquire on the loop on tcpfab: %v", err)
	}
	if _, err := lp.Lookup(ctx(t), "k"); !errors.Is(err, lockmap.ErrWouldBlock) {
		t.Fatalf("lookup on the loop on tcpfab: %v", err)
	}
	if _, err := lp.Extend(ctx(t), "k", "t", 0); !errors.Is(err, lockmap.ErrWouldBlock) {
		t.Fatalf("a release by Extend on the loop on tcpfab, without a doorbell: %v", err)
	}
	if d := ep.Counters().Snapshot().Sub(before); d.Out != [rdma.NumVerbs]uint64{} {
		t.Fatalf("verbs issued on the loop: %v", d.Out)
	}
	if _, ok, err := m.Acquire(ctx(t), []string{"k"}, "t", excl(time.Minute, 0)); !ok || err != nil {
		t.Fatalf("the same acquire on the map: %v %v", ok, err)
	}
}

// TestLoopRefusalIsNotAnAttempt: an acquire refused with ErrWouldBlock
// runs again off the event loop, so OnAcquire hears of it once, not twice.
func TestLoopRefusalIsNotAnAttempt(t *testing.T) {
	attempts := 0
	m, _ := maptest.Embedded(t, memnode.Config{Entries: 1 << 12, DeadAfter: 30 * time.Second},
		lockmap.Config{OnAcquire: func(shiftlock.Mode, time.Duration, bool, bool) { attempts++ }})
	lp := m.Loop(nil)
	if _, ok, err := lp.Acquire(ctx(t), []string{"k"}, "t1", excl(time.Minute, time.Second)); !ok || err != nil {
		t.Fatalf("free key: %v %v", ok, err)
	}
	if _, _, err := lp.Acquire(ctx(t), []string{"k"}, "t2", excl(time.Minute, time.Second)); !errors.Is(err, lockmap.ErrWouldBlock) {
		t.Fatalf("held key on the loop: %v, want ErrWouldBlock", err)
	}
	if attempts != 1 {
		t.Fatalf("OnAcquire heard %d attempts, want 1 (the refusal is not one)", attempts)
	}
}

// TestAcquireOrQueue: the event-loop driver answers a free key and a
// try-once in place; a held key with a budget is queued with its one
// atomic and handed the lock off the loop (Queued.Wait), or told "not
// acquired" when its budget runs out; a reentrant acquire it cannot do
// without blocking is refused with ErrWouldBlock, leaving nothing held.
func TestAcquireOrQueue(t *testing.T) {
	a, b := embeddedPair(t)
	c := ctx(t)
	f1, ok, q, err := a.Loop(nil).AcquireOrQueue(c, "k", "t1", excl(time.Minute, time.Second))
	if !ok || err != nil || q != nil || f1 == 0 {
		t.Fatalf("free key: fence %d ok %v queued %v err %v", f1, ok, q != nil, err)
	}
	if _, ok, q, err := a.Loop(nil).AcquireOrQueue(c, "k", "t2", excl(time.Minute, 0)); ok || err != nil || q != nil {
		t.Fatalf("held key, try-once: ok %v queued %v err %v", ok, q != nil, err)
	}
	ep := a.Domains()[0].Client.Endpoint()
	before := ep.Counters().Snapshot()
	_, ok, q, err = a.Loop(nil).AcquireOrQueue(c, "k", "t2", excl(time.Minute, time.Minute))
	if ok || err != nil || q == nil {
		t.Fatalf("held key with a budget: ok %v queued %v err %v, want queued", ok, q != nil, err)
	}
	if d := ep.Counters().Snapshot().Sub(before); d.OutAtomics() != 1 {
		t.Fatalf("queueing cost %d atomics, want 1", d.OutAtomics())
	}
	type answer struct {
		fence uint64
		ok    bool
		err   error
	}
	got := make(chan answer, 1)
	go func() {
		f, ok, err := q.Wait(c, nil)
		got <- answer{f, ok, err}
	}()
	if !a.Release("k", "t1") {
		t.Fatal("release")
	}
	r := <-got
	if !r.ok || r.err != nil || r.fence <= f1 {
		t.Fatalf("handed over: %+v, want a fence above %d", r, f1)
	}
	if in, err := a.Lookup(c, "k"); err != nil || in.State != lockmap.HeldHere || in.Holders[0].Token != "t2" {
		t.Fatalf("after the handover: %+v %v", in, err)
	}
	// A budget that runs out: "not acquired", and the queue is left clean:
	// the abandoned place passes the lock on in the background, and another
	// proxy gets the key once t2 lets go.
	_, _, q, err = a.Loop(nil).AcquireOrQueue(c, "k", "t3", excl(time.Minute, 20*time.Millisecond))
	if q == nil || err != nil {
		t.Fatalf("second waiter: queued %v err %v", q != nil, err)
	}
	if _, ok, err := q.Wait(c, nil); ok || err != nil {
		t.Fatalf("budget spent: ok %v err %v, want not acquired", ok, err)
	}
	// Reentrant refresh of the holder's own key needs no wait here: done in
	// place. Reentrant on a held key of another token with a budget queues.
	opt := excl(time.Minute, time.Second)
	opt.Reentrant = true
	if _, ok, q, err := a.Loop(nil).AcquireOrQueue(c, "k", "t2", opt); !ok || err != nil || q != nil {
		t.Fatalf("reentrant refresh: ok %v queued %v err %v", ok, q != nil, err)
	}
	if !a.Release("k", "t2") {
		t.Fatal("release t2")
	}
	if _, ok, err := b.AcquireKey(c, "k", "t4", excl(time.Minute, 10*time.Second)); !ok || err != nil {
		t.Fatalf("another proxy after the releases: ok %v err %v", ok, err)
	}
}

// TestQueuedOnLoopAnnouncesItself: an acquire queued from an event loop
// tells its predecessor at once that it follows (the Successor message),
// before anything waits for the handover: the holder's release hands the
// lock over without waiting for the queued acquire's goroutine to start.
func TestQueuedOnLoopAnnouncesItself(t *testing.T) {
	a, _ := embeddedPair(t)
	c := ctx(t)
	if _, ok, _, err := a.Loop(nil).AcquireOrQueue(c, "k", "holder", excl(time.Minute, 0)); !ok || err != nil {
		t.Fatal("setup", ok, err)
	}
	_, _, q, err := a.Loop(nil).AcquireOrQueue(c, "k", "waiter", excl(time.Minute, time.Minute))
	if q == nil || err != nil {
		t.Fatalf("queued %v err %v", q != nil, err)
	}
	released := make(chan struct{})
	go func() {
		a.Release("k", "holder")
		close(released)
	}()
	select {
	case <-released:
	case <-time.After(10 * time.Second): // a liveness bound, not a timing claim
		t.Fatal("the release waited for the queued acquire to announce itself from its wait")
	}
	if _, ok, err := q.Wait(c, nil); !ok || err != nil {
		t.Fatalf("handed over: ok %v err %v", ok, err)
	}
}
