package lockmap_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// TestNoWaitOnInlineMap: under NoWait, an in-process map completes what
// needs no wait and refuses, leaving nothing held, what would queue.
func TestNoWaitOnInlineMap(t *testing.T) {
	a, b := embeddedPair(t)
	c := ctx(t)
	nw := lockmap.NoWait(c)
	if !a.Inline() {
		t.Fatal("a memfab map must be inline")
	}
	if _, ok, err := a.Acquire(nw, []string{"k"}, "t1", excl(time.Minute, time.Second)); !ok || err != nil {
		t.Fatalf("free key under NoWait: %v %v", ok, err)
	}
	// Held, with a wait budget: would queue.
	if _, ok, err := a.Acquire(nw, []string{"k"}, "t2", excl(time.Minute, time.Second)); ok || !errors.Is(err, lockmap.ErrWouldBlock) {
		t.Fatalf("held key with a budget under NoWait: ok=%v err=%v, want ErrWouldBlock", ok, err)
	}
	// Held, try-only: a plain "not acquired".
	if _, ok, err := a.Acquire(nw, []string{"k"}, "t2", excl(time.Minute, 0)); ok || err != nil {
		t.Fatalf("held key, try-only, under NoWait: ok=%v err=%v", ok, err)
	}
	// The refused waits left nothing behind: releasing frees the key for
	// another proxy at once.
	if !a.Release("k", "t1") {
		t.Fatal("release")
	}
	if _, ok, err := b.Acquire(nw, []string{"k"}, "t3", excl(time.Minute, 0)); !ok || err != nil {
		t.Fatalf("after release: %v %v", ok, err)
	}
	if in, err := a.Lookup(nw, "k"); err != nil || in.State != lockmap.HeldElsewhere {
		t.Fatalf("lookup under NoWait: %+v %v", in, err)
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

// TestNoWaitOnNetworkMap: a map on a memnode process is not inline, and
// every lock operation under NoWait is refused before any verb.
func TestNoWaitOnNetworkMap(t *testing.T) {
	m, ep := networkMap(t, shiftlock.Config{})
	if m.Inline() {
		t.Fatal("a tcpfab map must not be inline")
	}
	before := ep.Counters().Snapshot()
	nw := lockmap.NoWait(ctx(t))
	if _, _, err := m.Acquire(nw, []string{"k"}, "t", excl(time.Minute, 0)); !errors.Is(err, lockmap.ErrWouldBlock) {
		t.Fatalf("acquire under NoWait on tcpfab: %v", err)
	}
	if _, err := m.Lookup(nw, "k"); !errors.Is(err, lockmap.ErrWouldBlock) {
		t.Fatalf("lookup under NoWait on tcpfab: %v", err)
	}
	if d := ep.Counters().Snapshot().Sub(before); d.Out != [rdma.NumVerbs]uint64{} {
		t.Fatalf("verbs issued under NoWait: %v", d.Out)
	}
	if _, ok, err := m.Acquire(ctx(t), []string{"k"}, "t", excl(time.Minute, 0)); !ok || err != nil {
		t.Fatalf("the same acquire without NoWait: %v %v", ok, err)
	}
}

// TestNoWaitRefusalIsNotAnAttempt: an acquire refused with ErrWouldBlock
// runs again off the event loop, so OnAcquire hears of it once, not twice.
func TestNoWaitRefusalIsNotAnAttempt(t *testing.T) {
	host := memnode.New(memnode.Config{Entries: 1 << 12, DeadAfter: 30 * time.Second})
	t.Cleanup(host.Close)
	ep, err := memfab.New(host).Join("p1")
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	m := lockmap.New([]*lockmap.Domain{{Name: "mem", Client: shiftlock.NewClient(ep, shiftlock.Config{})}},
		lockmap.Config{OnAcquire: func(shiftlock.Mode, time.Duration, bool, bool) { attempts++ }})
	t.Cleanup(m.Close)
	nw := lockmap.NoWait(ctx(t))
	if _, ok, err := m.Acquire(nw, []string{"k"}, "t1", excl(time.Minute, time.Second)); !ok || err != nil {
		t.Fatalf("free key: %v %v", ok, err)
	}
	if _, _, err := m.Acquire(nw, []string{"k"}, "t2", excl(time.Minute, time.Second)); !errors.Is(err, lockmap.ErrWouldBlock) {
		t.Fatalf("held key under NoWait: %v, want ErrWouldBlock", err)
	}
	if attempts != 1 {
		t.Fatalf("OnAcquire heard %d attempts, want 1 (the refusal is not one)", attempts)
	}
}

// networkMap is a lock table on a memnode process of its own, reached over
// tcpfab, as a proxy joined to a memory node runs; ep counts its verbs.
func networkMap(t *testing.T, cfg shiftlock.Config) (*lockmap.Map, *tcpfab.Endpoint) {
	t.Helper()
	mn := testproc.Memnode(t, "-entries", "4096", "-dead-after", "1m")
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	ep, err := tcpfab.Dial(dctx, mn.Addr, tcpfab.Config{Name: t.Name()})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	m := lockmap.New([]*lockmap.Domain{{Name: "mn", Client: shiftlock.NewClient(ep, cfg)}}, lockmap.Config{})
	t.Cleanup(m.Close)
	return m, ep
}
