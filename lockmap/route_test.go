package lockmap

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

type routedProxy struct {
	m  *Map
	ep rdma.Endpoint
}

// routed returns n maps with quorum routing on one memory node, once each
// sees all n as routers.
func routed(t testing.TB, n int) []routedProxy {
	t.Helper()
	old := helloEvery
	helloEvery = 20 * time.Millisecond
	t.Cleanup(func() { helloEvery = old })
	host := memnode.New(memnode.Config{Entries: 1 << 12, HeartbeatInterval: 100 * time.Millisecond, DeadAfter: 30 * time.Second})
	t.Cleanup(host.Close)
	fab := memfab.New(host)
	var ps []routedProxy
	for i := 0; i < n; i++ {
		ep, err := fab.Join(fmt.Sprint("p", i+1))
		if err != nil {
			t.Fatal(err)
		}
		lease := NewLease(ep)
		t.Cleanup(lease.Stop)
		m := New([]*Domain{{Name: "mem", Client: shiftlock.NewClient(ep, shiftlock.Config{OwnerTags: true}), Lease: lease}}, Config{Route: true})
		t.Cleanup(m.Close)
		ps = append(ps, routedProxy{m, ep})
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		all := true
		for _, p := range ps {
			all = all && p.m.RouteStats().Routers.Load() == int64(n)
		}
		if all {
			return ps
		}
		if time.Now().After(end) {
			t.Fatal("the proxies did not see each other as routers")
		}
	}
}

func atomics(ps []routedProxy) uint64 {
	var n uint64
	for _, p := range ps {
		n += p.ep.Counters().Snapshot().OutAtomics()
	}
	return n
}

// keyHomedAt finds a key whose home is proxy i, as every proxy sees it.
func keyHomedAt(t *testing.T, ps []routedProxy, i int) string {
	t.Helper()
	for k := 0; k < 10000; k++ {
		key := fmt.Sprint("key", k)
		d, e := ps[0].m.Where(key)
		_ = d
		if ps[0].m.routerOf(0, ps[0].m.Domains()[0]).home(e) == ps[i].ep.Node() {
			return key
		}
	}
	t.Fatal("no key homed there")
	return ""
}

// TestRoutedQuorumIsOneLock: the same key and token asked through three
// routed proxies is one lock: one atomic to take it, one to let it go, and
// another token gets it only once every proxy has released, whichever
// proxy is the key's home.
func TestRoutedQuorumIsOneLock(t *testing.T) {
	ps := routed(t, 3)
	c := context.Background()
	for home := range ps {
		key := keyHomedAt(t, ps, home)
		before := atomics(ps)
		var fences [3]uint64
		for i, p := range ps {
			f, ok, err := p.m.Acquire(c, []string{key}, TokT, AcquireOptions{TTL: time.Minute, Wait: time.Second})
			if err != nil || !ok {
				t.Fatalf("home %d, proxy %d: %v %v", home, i, ok, err)
			}
			fences[i] = f[0]
		}
		if fences[0] != fences[1] || fences[1] != fences[2] {
			t.Fatalf("one lock, three fences: %v", fences)
		}
		if n := atomics(ps) - before; n != 1 {
			t.Fatalf("home %d: three requests of one token cost %d atomics, want 1", home, n)
		}
		before = atomics(ps)
		for _, p := range ps {
			p.m.Release(key, TokT)
		}
		WaitFree(t, ps[0].m, key)
		if n := atomics(ps) - before; n != 1 {
			t.Fatalf("home %d: three releases of one lock cost %d atomics, want 1", home, n)
		}

		// Another token is refused while any proxy still holds T's.
		for _, p := range ps {
			if _, ok, err := p.m.Acquire(c, []string{key}, TokT, AcquireOptions{TTL: time.Minute, Wait: time.Second}); !ok || err != nil {
				t.Fatalf("home %d: T again: %v %v", home, ok, err)
			}
		}
		for i := 0; i < 2; i++ {
			ps[i].m.Release(key, TokT)
			// The entry itself stays held, not just each proxy's instance.
			if in, err := ps[i].m.Lookup(c, key); err != nil || in.State != HeldElsewhere {
				t.Fatalf("home %d: with %d of 3 shares released the entry is %v (%v), want held", home, i+1, in.State, err)
			}
			if _, ok, _ := ps[(i+1)%3].m.Acquire(c, []string{key}, TokU, AcquireOptions{TTL: time.Minute, Wait: 20 * time.Millisecond}); ok {
				t.Fatalf("home %d: another token got the lock with %d of 3 shares released", home, i+1)
			}
		}
		ps[2].m.Release(key, TokT)
		if _, ok, err := ps[0].m.Acquire(c, []string{key}, TokU, AcquireOptions{TTL: time.Minute, Wait: 5 * time.Second}); !ok || err != nil {
			t.Fatalf("home %d: U after every release: %v %v", home, ok, err)
		}
		ps[0].m.Release(key, TokU)
		WaitFree(t, ps[0].m, key)
	}
}

// TestRoutedRedLock: many RedLock clients over three routed proxies; nobody
// is inside twice, every attempt gets its quorum, and the key ends free.
func TestRoutedRedLock(t *testing.T) {
	ps := routed(t, 3)
	var ms []*Map
	for _, p := range ps {
		ms = append(ms, p.m)
	}
	RedLockRounds(t, ms, 6, 20, 5*time.Second, 3*time.Second)
	var joined uint64
	for _, p := range ps {
		joined += p.m.RouteStats().Joined.Load()
	}
	if joined == 0 {
		t.Fatal("no request joined its token's lock: routing did not route")
	}
}

// TestRoutedShareOutlivesItsProxy: a share whose proxy vanished without
// releasing ends with its TTL at the home, and the lock with it.
func TestRoutedShareOutlivesItsProxy(t *testing.T) {
	ps := routed(t, 2)
	key := keyHomedAt(t, ps, 0)
	c := context.Background()
	if _, ok, err := ps[1].m.Acquire(c, []string{key}, TokT, AcquireOptions{TTL: 300 * time.Millisecond, Wait: time.Second}); !ok || err != nil {
		t.Fatalf("%v %v", ok, err)
	}
	// Proxy 1 stops: its TTL expiry never runs, so it never releases.
	ps[1].m.exp.stop()
	start := time.Now()
	if _, ok, err := ps[0].m.Acquire(c, []string{key}, TokU, AcquireOptions{TTL: time.Minute, Wait: 5 * time.Second}); !ok || err != nil {
		t.Fatalf("U: %v %v", ok, err)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Fatalf("U got the lock after %v, before T's share ran out", waited)
	}
}

// TestRoutedHomeUnreachable: when a key's home cannot be reached, the
// acquire takes the lock where it is asked.
func TestRoutedHomeUnreachable(t *testing.T) {
	ps := routed(t, 2)
	key := keyHomedAt(t, ps, 1)
	ps[1].m.Close()
	_ = ps[1].ep.Close()
	c := context.Background()
	if _, ok, err := ps[0].m.Acquire(c, []string{key}, TokT, AcquireOptions{TTL: time.Minute, Wait: time.Second}); !ok || err != nil {
		t.Fatalf("%v %v", ok, err)
	}
	if ps[0].m.RouteStats().Fallbacks.Load() == 0 {
		t.Fatal("no fallback counted")
	}
	if !ps[0].m.Release(key, TokT) {
		t.Fatal("release")
	}
	WaitFree(t, ps[0].m, key)
}

// TestRoutedExtend: a share's TTL is extended at its home; one the home
// no longer has is reported gone.
func TestRoutedExtend(t *testing.T) {
	ps := routed(t, 2)
	key := keyHomedAt(t, ps, 0)
	c := context.Background()
	// TTLs with room for a loaded machine: an extend that came after its
	// TTL would find the share gone, as on Redis.
	if _, ok, err := ps[1].m.Acquire(c, []string{key}, TokT, AcquireOptions{TTL: time.Second, Wait: time.Second}); !ok || err != nil {
		t.Fatalf("%v %v", ok, err)
	}
	ps[1].m.exp.stop() // only the home's timer may end it
	for i := 0; i < 4; i++ {
		time.Sleep(300 * time.Millisecond) // past the first TTL by the third
		if ok, err := ps[1].m.Extend(c, key, TokT, time.Second); !ok || err != nil {
			t.Fatalf("extend %d: %v %v", i, ok, err)
		}
	}
	if _, ok, _ := ps[0].m.Acquire(c, []string{key}, TokU, AcquireOptions{TTL: time.Minute, Wait: 50 * time.Millisecond}); ok {
		t.Fatal("U got the lock while T's share was being extended")
	}
	time.Sleep(1500 * time.Millisecond)
	if ok, _ := ps[1].m.Extend(c, key, TokT, time.Second); ok {
		t.Fatal("a share that ran out at its home was extended")
	}
	if in, _ := ps[1].m.Lookup(c, key); len(in.Holders) != 0 {
		t.Fatalf("the proxy still reports %v after its home let the share go", in.Holders)
	}
}

// TestRoutedHoldsStayPut: a routed hold cannot change hands in place,
// neither a share of the home's lock nor the home's own hold, since the
// home knows its owner by the old token's tag: Reassign says no and
// leaves them as they were.
func TestRoutedHoldsStayPut(t *testing.T) {
	ps := routed(t, 2)
	key := keyHomedAt(t, ps, 0)
	c := context.Background()
	for _, p := range ps {
		if _, ok, err := p.m.Acquire(c, []string{key}, TokT, AcquireOptions{TTL: time.Minute, Wait: time.Second}); !ok || err != nil {
			t.Fatalf("%v %v", ok, err)
		}
		if ok, err := p.m.Reassign(c, []string{key}, []string{TokT}, TokU, time.Second); ok || err != nil {
			t.Fatalf("a routed hold changed hands: %v %v", ok, err)
		}
		if in, _ := p.m.Lookup(c, key); len(in.Holders) != 1 || in.Holders[0].Token != TokT || in.Holders[0].TTL <= time.Second {
			t.Fatalf("after a refused reassign: %+v", in.Holders)
		}
	}
	for _, p := range ps {
		p.m.Release(key, TokT)
	}
}

// FuzzRouteDeliver: whatever arrives on the service target, from whichever
// node, the router does not panic (answers are only taken from the home a
// request went to, about its entry).
func FuzzRouteDeliver(f *testing.F) {
	f.Add(uint16(2), []byte{rtGranted, 0, 0, 0, 1, 0, 0, 0})
	f.Add(uint16(1), []byte{rtAcquire, 0, 0, 0, 9, 0, 0, 0, 5})
	f.Add(uint16(3), []byte{rtRelease})
	f.Add(uint16(2), []byte{rtExtend, 1, 2, 3})
	f.Add(uint16(7), []byte{200})
	ps := routed(f, 2)
	r := ps[0].m.routerOf(0, ps[0].m.Domains()[0])
	f.Fuzz(func(t *testing.T, from uint16, b []byte) {
		var p rdma.Payload
		copy(p[:], b)
		_ = r.deliver(rdma.Message{From: rdma.NodeID(from), To: shiftlock.ServiceTarget, Payload: p})
	})
}
