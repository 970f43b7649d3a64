package lockmap_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/lockmap/maptest"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// twoProxies returns two maps, as two proxies would have, on one memory node.
func twoProxies(t *testing.T, entries uint64) (*lockmap.Map, *lockmap.Map) {
	ms := proxies(t, entries, 2)
	return ms[0], ms[1]
}

// proxies returns n maps, as n proxies would have, on one memory node.
func proxies(t *testing.T, entries uint64, n int) []*lockmap.Map {
	t.Helper()
	// A proxy's lease self-fences after DeadAfter/2 without an acknowledged
	// beat; no test here is about fencing, so give a loaded host room.
	host := memnode.New(memnode.Config{Entries: entries, HeartbeatInterval: 100 * time.Millisecond, DeadAfter: 30 * time.Second})
	t.Cleanup(host.Close)
	fab := memfab.New(host)
	var ms []*lockmap.Map
	for i := 0; i < n; i++ {
		ep, err := fab.Join(fmt.Sprint("p", i+1))
		if err != nil {
			t.Fatal(err)
		}
		lease := lockmap.NewLease(ep)
		t.Cleanup(lease.Stop)
		m := lockmap.New([]*lockmap.Domain{{Name: "mem", Client: shiftlock.NewClient(ep, shiftlock.Config{OwnerTags: true}), Lease: lease}}, lockmap.Config{})
		t.Cleanup(m.Close)
		ms = append(ms, m)
	}
	return ms
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func excl(ttl, wait time.Duration) lockmap.AcquireOptions {
	return lockmap.AcquireOptions{Mode: shiftlock.Exclusive, TTL: ttl, Wait: wait}
}

func TestAcquireReleaseAndStates(t *testing.T) {
	a, b := twoProxies(t, 1<<12)
	c := ctx(t)
	f, ok, err := a.Acquire(c, []string{"k"}, "tok1", excl(time.Minute, 0))
	if err != nil || !ok || len(f) != 1 {
		t.Fatalf("acquire: %v %v %v", f, ok, err)
	}
	if _, ok, _ := a.Acquire(c, []string{"k"}, "tok2", excl(time.Minute, 0)); ok {
		t.Fatal("second token got a held key")
	}
	if _, ok, _ := a.Acquire(c, []string{"k"}, "tok1", excl(time.Minute, 0)); ok {
		t.Fatal("SET NX by the same token must not succeed without reentrancy")
	}
	if _, ok, _ := b.Acquire(c, []string{"k"}, "tok3", excl(time.Minute, 0)); ok {
		t.Fatal("other proxy got a held key")
	}
	in, _ := a.Lookup(c, "k")
	if in.State != lockmap.HeldHere || in.Holders[0].Token != "tok1" || in.Holders[0].Fence != f[0] {
		t.Fatalf("lookup here: %+v", in)
	}
	if in.Holders[0].TTL <= 59*time.Second || in.Holders[0].TTL > time.Minute {
		t.Fatalf("ttl %v", in.Holders[0].TTL)
	}
	elsewhere, _ := b.Lookup(c, "k")
	if elsewhere.State != lockmap.HeldElsewhere {
		t.Fatalf("other proxy must not call a held key free: %+v", elsewhere)
	}
	if free, _ := b.Lookup(c, "other"); free.State != lockmap.Free {
		t.Fatalf("free key: %+v", free)
	}
	if b.Release("k", "tok1") {
		t.Fatal("released through a proxy that does not hold it")
	}
	if a.Release("k", "wrong") {
		t.Fatal("released with the wrong token")
	}
	if !a.Release("k", "tok1") {
		t.Fatal("release failed")
	}
	f2, ok, _ := b.Acquire(c, []string{"k"}, "tok3", excl(time.Minute, 0))
	if !ok || f2[0] <= f[0] {
		t.Fatalf("reacquire via other proxy: ok=%v fence %d after %d", ok, f2, f)
	}
}

func TestWaitGetsHandover(t *testing.T) {
	a, b := twoProxies(t, 1<<12)
	c := ctx(t)
	if _, ok, _ := a.Acquire(c, []string{"hot"}, "first", excl(time.Minute, 0)); !ok {
		t.Fatal("acquire")
	}
	type res struct {
		ok  bool
		err error
		at  time.Time
	}
	done := make(chan res)
	go func() {
		_, ok, err := b.Acquire(c, []string{"hot"}, "second", excl(time.Minute, 5*time.Second))
		done <- res{ok, err, time.Now()}
	}()
	time.Sleep(50 * time.Millisecond)
	released := time.Now()
	a.Release("hot", "first")
	r := <-done
	if !r.ok || r.err != nil || r.at.Before(released) {
		t.Fatalf("queued acquire: %+v", r)
	}
	// A budget that runs out answers "not acquired", and the queued waiter
	// it leaves behind must not keep the lock.
	_, ok, err := a.Acquire(c, []string{"hot"}, "third", excl(time.Minute, 30*time.Millisecond))
	if ok || err != nil {
		t.Fatalf("budget exhausted: ok=%v err=%v", ok, err)
	}
	b.Release("hot", "second")
	if _, ok, _ := a.Acquire(c, []string{"hot"}, "fourth", excl(time.Minute, 10*time.Second)); !ok {
		t.Fatal("lock stuck after an abandoned wait")
	}
}

func TestTTLExpiryReleasesAndHandsOver(t *testing.T) {
	a, b := twoProxies(t, 1<<12)
	c := ctx(t)
	start := time.Now() // before the TTL starts, so any grant before it ran out shows
	if _, ok, _ := a.Acquire(c, []string{"ttl"}, "short", excl(80*time.Millisecond, 0)); !ok {
		t.Fatal("acquire")
	}
	_, ok, err := b.Acquire(c, []string{"ttl"}, "waiter", excl(time.Minute, 10*time.Second))
	if !ok || err != nil {
		t.Fatalf("waiter did not get the expired lock: %v %v", ok, err)
	}
	if waited := time.Since(start); waited < 80*time.Millisecond {
		t.Fatalf("granted before the TTL ran out (%v)", waited)
	}
	if in, _ := a.Lookup(c, "ttl"); in.State != lockmap.HeldElsewhere {
		t.Fatalf("expired key still reported here: %+v", in)
	}
	// Extending replaces the TTL (here, shortens the minute); PEXPIRE 0
	// deletes.
	if ok, _ := b.Extend(c, "ttl", "waiter", 5*time.Second); !ok {
		t.Fatal("extend")
	}
	if ok, _ := b.Extend(c, "ttl", "nobody", time.Second); ok {
		t.Fatal("extend with the wrong token")
	}
	if in, _ := b.Lookup(c, "ttl"); in.State != lockmap.HeldHere || len(in.Holders) != 1 || in.Holders[0].TTL > 5*time.Second || in.Holders[0].TTL <= 0 {
		t.Fatalf("after extending to 5s: %+v", in)
	}
	if ok, _ := b.Extend(c, "ttl", "waiter", 0); !ok {
		t.Fatal("pexpire 0")
	}
	if in, _ := b.Lookup(c, "ttl"); in.State != lockmap.Free {
		t.Fatalf("pexpire 0 must delete: %+v", in)
	}
}

func TestMultiKeyAllOrNothingAndSharedEntries(t *testing.T) {
	// One entry: every key collides, so multi-key acquires share a grant.
	a, b := twoProxies(t, 1)
	c := ctx(t)
	f, ok, err := a.Acquire(c, []string{"x", "y", "z"}, "t", excl(time.Minute, 0))
	if !ok || err != nil || f[0] != f[1] || f[1] != f[2] {
		t.Fatalf("multi-key on one entry: %v %v %v", f, ok, err)
	}
	if in, _ := a.Lookup(c, "w"); in.State != lockmap.Free {
		t.Fatalf("a key sharing our exclusively held entry is free: %+v", in)
	}
	if _, ok, _ := b.Acquire(c, []string{"w"}, "u", excl(time.Minute, 0)); ok {
		t.Fatal("collision: the shared entry is held")
	}
	a.Release("x", "t")
	a.Release("y", "t")
	if _, ok, _ := b.Acquire(c, []string{"w"}, "u", excl(time.Minute, 0)); ok {
		t.Fatal("entry released before its last key")
	}
	a.Release("z", "t")
	if _, ok, _ := b.Acquire(c, []string{"w"}, "u", excl(time.Minute, 0)); !ok {
		t.Fatal("entry not released after its last key")
	}
}

func TestMultiKeyRollsBack(t *testing.T) {
	a, b := twoProxies(t, 1<<14)
	c := ctx(t)
	if _, ok, _ := b.Acquire(c, []string{"k7"}, "other", excl(time.Minute, 0)); !ok {
		t.Fatal("setup")
	}
	keys := []string{}
	for i := 0; i < 10; i++ {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	if _, ok, _ := a.Acquire(c, keys, "t", excl(time.Minute, 0)); ok {
		t.Fatal("multi-key acquire ignored a held key")
	}
	for _, k := range keys {
		if k == "k7" {
			continue
		}
		if in, _ := a.Lookup(c, k); in.State != lockmap.Free {
			t.Fatalf("%s left held after rollback: %v", k, in.State)
		}
	}
}

func TestReentrantAndShared(t *testing.T) {
	a, b := twoProxies(t, 1<<12)
	c := ctx(t)
	f, _, _ := a.Acquire(c, []string{"r"}, "t", excl(time.Second, 0))
	opt := excl(time.Minute, 0)
	opt.Reentrant = true
	f2, ok, err := a.Acquire(c, []string{"r"}, "t", opt)
	if !ok || err != nil || f2[0] != f[0] {
		t.Fatalf("reentrant: %v %v %v", f2, ok, err)
	}
	if in, _ := a.Lookup(c, "r"); in.Holders[0].TTL < 30*time.Second {
		t.Fatalf("reentrant acquire must reset the TTL: %v", in.Holders[0].TTL)
	}
	sh := lockmap.AcquireOptions{Mode: shiftlock.Shared, TTL: time.Minute}
	if _, ok, _ := a.Acquire(c, []string{"s"}, "r1", sh); !ok {
		t.Fatal("shared 1")
	}
	if _, ok, _ := b.Acquire(c, []string{"s"}, "r2", sh); !ok {
		t.Fatal("shared 2 on another proxy")
	}
	if _, ok, _ := a.Acquire(c, []string{"s"}, "r3", sh); !ok {
		t.Fatal("shared 3")
	}
	if _, _, err := a.Acquire(c, []string{"s"}, "r1", sh); err == nil {
		t.Fatal("duplicate shared token accepted")
	}
	if _, ok, _ := b.Acquire(c, []string{"s"}, "w", excl(time.Minute, 0)); ok {
		t.Fatal("writer admitted among readers")
	}
	if in, _ := a.Lookup(c, "s"); len(in.Holders) != 2 {
		t.Fatalf("holders here: %+v", in.Holders)
	}
	if n := a.Delete("s"); n != 2 {
		t.Fatalf("delete released %d holds", n)
	}
	b.Release("s", "r2")
	if _, ok, _ := b.Acquire(c, []string{"s"}, "w", excl(time.Minute, 0)); !ok {
		t.Fatal("writer after readers left")
	}
}

func TestWaitPolicy(t *testing.T) {
	p := lockmap.WaitPolicy{Rules: []lockmap.WaitRule{{Pattern: "try:*", Wait: 0}, {Pattern: "slow:*", Wait: time.Second}, {Pattern: "auto:*", Auto: true}}}
	for _, c := range []struct {
		key  string
		ttl  time.Duration
		want time.Duration
	}{
		{"try:a", 10 * time.Second, 0},
		{"slow:a", 10 * time.Second, time.Second},
		{"auto:a", 10 * time.Second, 400 * time.Millisecond},
		{"other", 8 * time.Second, 320 * time.Millisecond},
		{"other", time.Hour, 2 * time.Second},
		{"other", 0, 0},
	} {
		if got := p.Budget(c.key, c.ttl); got != c.want {
			t.Errorf("Budget(%q, %v) = %v, want %v", c.key, c.ttl, got, c.want)
		}
	}
}

func TestLocateIsStable(t *testing.T) {
	// These values are a contract: every proxy, every run, every version.
	entries := []uint64{1 << 20, 1 << 20, 1 << 20}
	for key, want := range map[string][2]uint64{
		"lock:a": {1, 476173}, "resource": {2, 225932}, "savings:42": {2, 319040},
	} {
		if d, e := lockmap.Locate(key, entries); uint64(d) != want[0] || e != want[1] {
			t.Errorf("Locate(%q) = %d/%d, want %d/%d: the key mapping changed", key, d, e, want[0], want[1])
		}
	}
	// Adding a memory node moves about a third of the keys, and only to it.
	moved := 0
	for i := 0; i < 3000; i++ {
		k := fmt.Sprintf("key:%d", i)
		d2, _ := lockmap.Locate(k, entries[:2])
		d3, _ := lockmap.Locate(k, entries)
		if d2 != d3 {
			moved++
			if d3 != 2 {
				t.Fatalf("%s moved from %d to %d, not to the new node", k, d2, d3)
			}
		}
	}
	if moved < 800 || moved > 1200 {
		t.Fatalf("%d of 3000 keys moved, want about 1000", moved)
	}
}

// shadowOf takes key with token through m, try-only, as the second proxy of
// a RedLock client. The holder confirms its owner tag a round trip after it
// answered, and the try's short grace for that can be outlasted on a loaded
// test host, so it retries as a RedLock client would (a failed try changes
// nothing).
func shadowOf(c context.Context, m *lockmap.Map, key, token string) ([]uint64, bool, error) {
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		f, ok, err := m.Acquire(c, []string{key}, token, excl(time.Minute, 0))
		if ok || err != nil || !time.Now().Before(end) {
			return f, ok, err
		}
	}
}

// TestSameTokenThroughTwoProxies is RedLock pointed at several proxies that
// share a memory node: the same key and token through a second proxy is
// answered as held (a shadow), with the holder's fence, while other tokens
// stay out; releasing everywhere frees the lock.
func TestSameTokenThroughTwoProxies(t *testing.T) {
	a, b := twoProxies(t, 1<<12)
	c := ctx(t)
	fa, ok, _ := a.Acquire(c, []string{"rl"}, lockmap.TokT, excl(time.Minute, 0))
	if !ok {
		t.Fatal("acquire via a")
	}
	fb, ok, err := shadowOf(c, b, "rl", lockmap.TokT)
	if !ok || err != nil || fb[0] != fa[0] {
		t.Fatalf("same token via b: ok=%v err=%v fence %v want %v", ok, err, fb, fa)
	}
	if _, ok, _ := b.Acquire(c, []string{"rl"}, lockmap.TokU, excl(time.Minute, 50*time.Millisecond)); ok {
		t.Fatal("other token got a key shadowed here")
	}
	in, _ := b.Lookup(c, "rl")
	if in.State != lockmap.HeldHere || !in.Holders[0].Shadow || in.Holders[0].Token != lockmap.TokT {
		t.Fatalf("shadow lookup: %+v", in)
	}
	if !b.Release("rl", lockmap.TokT) || !a.Release("rl", lockmap.TokT) {
		t.Fatal("release")
	}
	// The tag is gone with the holder: the same token is a new acquire now.
	if f, ok, _ := b.Acquire(c, []string{"rl"}, lockmap.TokT, excl(time.Minute, 0)); !ok || f[0] <= fa[0] {
		t.Fatalf("fresh acquire after release: %v %v", f, ok)
	}
	if _, ok, err := shadowOf(c, a, "rl", lockmap.TokT); !ok || err != nil {
		t.Fatalf("shadow via a after b took it: %v", err)
	}
}

// TestConstantTokenThroughTwoProxies: two applications that lock one key
// with the same constant value ("1"), each through its own proxy, are kept
// apart, as one redis-server keeps them: a value too short to be a RedLock
// client's random token is never recognised as the same owner, and each
// grant has a fence of its own. Before, both held the key with fence 1.
func TestConstantTokenThroughTwoProxies(t *testing.T) {
	a, b := twoProxies(t, 1<<12)
	c := ctx(t)
	for _, tok := range []string{"1", "locked", "worker-host-0001"[:lockmap.MinOwnerToken-1]} {
		key := "job:" + tok
		fa, ok, err := a.Acquire(c, []string{key}, tok, excl(time.Minute, 0))
		if !ok || err != nil {
			t.Fatalf("%q via a: %v %v", tok, ok, err)
		}
		for _, wait := range []time.Duration{0, 30 * time.Millisecond} {
			if fb, ok, err := b.Acquire(c, []string{key}, tok, excl(time.Minute, wait)); ok || err != nil {
				t.Fatalf("%q via b (wait %v) while a holds it: granted %v (a's fence %v), %v", tok, wait, fb, fa, err)
			}
		}
		if !a.Release(key, tok) {
			t.Fatal("release")
		}
		fb, ok, err := b.Acquire(c, []string{key}, tok, excl(time.Minute, 5*time.Second))
		if !ok || err != nil || fb[0] <= fa[0] {
			t.Fatalf("%q via b after a let go: %v %v %v, want a fence above %v", tok, fb, ok, err, fa)
		}
		b.Release(key, tok)
	}
}

// TestShadowFoundWhileQueued covers the race where the second proxy asks
// before the winner has written its tag: the waiter notices the tag.
func TestShadowFoundWhileQueued(t *testing.T) {
	a, b := twoProxies(t, 1<<12)
	c := ctx(t)
	// A different token holds first; then, as it releases, TokT wins via a
	// while b is already queued for TokT.
	if _, ok, _ := a.Acquire(c, []string{"q"}, "first", excl(time.Minute, 0)); !ok {
		t.Fatal("setup")
	}
	res := make(chan bool)
	go func() {
		_, ok, _ := b.Acquire(c, []string{"q"}, lockmap.TokT, excl(time.Minute, 2*time.Second))
		res <- ok
	}()
	time.Sleep(30 * time.Millisecond)
	go func() {
		_, _, _ = a.Acquire(c, []string{"q"}, lockmap.TokT, excl(time.Minute, 2*time.Second))
	}()
	time.Sleep(30 * time.Millisecond)
	a.Release("q", "first")
	if !<-res {
		t.Fatal("queued acquire of the same token through b failed")
	}
}

// TestRedLockCollapsesOverProxies is RedLock over three proxies that share
// a memory node: every client asks all three at once and needs two. Its
// requests meet in one lock entry and recognise each other, so each
// client's three requests take one place in the queue: nobody is inside
// twice, and (with a wait budget that covers the queue ahead) every attempt
// reaches quorum at once instead of splitting the votes.
func TestRedLockCollapsesOverProxies(t *testing.T) {
	lockmap.RedLockRounds(t, proxies(t, 1<<12, 3), 6, 10, 5*time.Second, 2*time.Second)
}

// TestHoldEndReported: OnHoldEnd hears of every hold's end with how long
// it lasted and whether its TTL ended it; Drain refuses acquires after.
func TestHoldEndReported(t *testing.T) {
	type end struct {
		held    time.Duration
		expired bool
	}
	ends := make(chan end, 4)
	m, _ := maptest.Embedded(t, memnode.Config{Entries: 1 << 12, DeadAfter: 30 * time.Second}, lockmap.Config{
		OnHoldEnd: func(_ shiftlock.Mode, held time.Duration, expired bool) { ends <- end{held, expired} },
	})
	c := ctx(t)
	if _, ok, err := m.Acquire(c, []string{"r"}, "t", excl(time.Minute, 0)); !ok || err != nil {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	time.Sleep(20 * time.Millisecond)
	if !m.Release("r", "t") {
		t.Fatal("release")
	}
	if e := <-ends; e.expired || e.held < 20*time.Millisecond || e.held > time.Minute {
		t.Fatalf("released hold reported as %+v", e)
	}
	if _, ok, err := m.Acquire(c, []string{"x"}, "t", excl(30*time.Millisecond, 0)); !ok || err != nil {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	select {
	case e := <-ends:
		if !e.expired || e.held < 30*time.Millisecond {
			t.Fatalf("expired hold reported as %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an expiry was never reported")
	}
	m.Drain()
	if _, ok, err := m.Acquire(c, []string{"y"}, "t", excl(time.Minute, 0)); ok || !errors.Is(err, lockmap.ErrDraining) {
		t.Fatalf("acquire while draining: %v %v; want ErrDraining", ok, err)
	}
}

// TestShorterTTLAfterLongerExpires: the expirer's timer is armed for the
// earliest deadline it has seen; a hold due sooner, added behind longer
// ones or after the only one went, must re-arm it.
func TestShorterTTLAfterLongerExpires(t *testing.T) {
	m, _ := twoProxies(t, 1<<12)
	c := ctx(t)
	for _, k := range []string{"long1", "long2"} {
		if _, ok, _ := m.Acquire(c, []string{k}, "t", excl(time.Minute, 0)); !ok {
			t.Fatal("acquire", k)
		}
	}
	// Let the expirer's goroutine arm its timer for what it has, so that
	// what follows must re-arm it (else its first look would see all).
	time.Sleep(50 * time.Millisecond)
	// A release leaves the timer armed for a hold that has gone.
	if _, ok, _ := m.Acquire(c, []string{"gone"}, "t", excl(30*time.Second, 0)); !ok {
		t.Fatal("acquire gone")
	}
	m.Release("gone", "t")
	if _, ok, _ := m.Acquire(c, []string{"short"}, "t", excl(50*time.Millisecond, 0)); !ok {
		t.Fatal("acquire short")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		in, err := m.Lookup(c, "short")
		if err != nil {
			t.Fatal(err)
		}
		if in.State == lockmap.Free {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a 50ms TTL behind minute-long ones has not expired after 10 s: %+v", in)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if in, _ := m.Lookup(c, "long1"); in.State != lockmap.HeldHere {
		t.Fatalf("a minute-long hold went with the short one: %+v", in)
	}
}

// holder is key's only holder on m, or fails the test.
func holder(t *testing.T, m *lockmap.Map, key string) lockmap.Holder {
	t.Helper()
	in, err := m.Lookup(context.Background(), key)
	if err != nil || in.State != lockmap.HeldHere || len(in.Holders) != 1 {
		t.Fatalf("%s: %+v %v, want one holder here", key, in, err)
	}
	return in.Holders[0]
}

// TestReassignKeepsTheLock: a hold changes hands in place, keeping its
// lock (same fencing token, never free in between) with the new TTL; all
// or nothing over several keys; and a hold it cannot move (wrong token,
// a shadow of a lock held through another proxy, a shared hold) stays
// exactly as it was.
func TestReassignKeepsTheLock(t *testing.T) {
	a, b := twoProxies(t, 1<<12)
	c := ctx(t)
	if _, ok, _ := a.Acquire(c, []string{"k"}, "foobar", excl(time.Minute, 0)); !ok {
		t.Fatal("acquire")
	}
	before := holder(t, a, "k")
	if ok, err := a.Reassign(c, []string{"k"}, []string{"other"}, "foobaz", 5*time.Second); ok || err != nil {
		t.Fatalf("reassign from the wrong token: %v %v", ok, err)
	}
	if h := holder(t, a, "k"); h.Token != "foobar" || h.TTL <= 5*time.Second {
		t.Fatalf("after a refused reassign: %+v", h)
	}
	if ok, err := a.Reassign(c, []string{"k"}, []string{"foobar"}, "foobaz", 5*time.Second); !ok || err != nil {
		t.Fatalf("reassign: %v %v", ok, err)
	}
	h := holder(t, a, "k")
	if h.Token != "foobaz" || h.Fence != before.Fence || h.TTL > 5*time.Second || h.TTL <= 0 {
		t.Fatalf("after reassign: %+v, want foobaz with fence %d and a 5s TTL", h, before.Fence)
	}
	if a.Release("k", "foobar") || !a.Release("k", "foobaz") {
		t.Fatal("the old token released it, or the new one could not")
	}

	// Several keys: one that cannot move keeps the others where they are.
	if _, ok, _ := a.Acquire(c, []string{"m1", "m2"}, "tok", excl(time.Minute, 0)); !ok {
		t.Fatal("multi acquire")
	}
	if _, ok, _ := a.Acquire(c, []string{"m3"}, "else", excl(time.Minute, 0)); !ok {
		t.Fatal("acquire m3")
	}
	if ok, _ := a.Reassign(c, []string{"m1", "m3"}, []string{"tok", "tok"}, "new", time.Second); ok {
		t.Fatal("reassigned a key another token holds")
	}
	if holder(t, a, "m1").Token != "tok" || holder(t, a, "m3").Token != "else" {
		t.Fatal("a refused multi-key reassign changed a hold")
	}
	if ok, _ := a.Reassign(c, []string{"m1", "m2"}, []string{"tok", "tok"}, "new", time.Second); !ok {
		t.Fatal("multi-key reassign")
	}
	if holder(t, a, "m1").Token != "new" || holder(t, a, "m2").Token != "new" {
		t.Fatal("multi-key reassign did not move both")
	}

	// A shadow: b answers for a's lock, which b's hold cannot give away.
	if _, ok, _ := a.Acquire(c, []string{"s"}, lockmap.TokT, excl(time.Minute, 0)); !ok {
		t.Fatal("acquire s")
	}
	if _, ok, err := shadowOf(c, b, "s", lockmap.TokT); !ok || err != nil {
		t.Fatalf("shadow: %v %v", ok, err)
	}
	if ok, _ := b.Reassign(c, []string{"s"}, []string{lockmap.TokT}, "new", time.Second); ok {
		t.Fatal("a shadow changed hands")
	}
	if h := holder(t, b, "s"); h.Token != lockmap.TokT || !h.Shadow || h.TTL <= time.Second {
		t.Fatalf("the shadow after a refused reassign: %+v", h)
	}

	// A shared hold shares its lock with other tokens.
	if _, ok, _ := a.Acquire(c, []string{"r"}, "reader", lockmap.AcquireOptions{Mode: shiftlock.Shared, TTL: time.Minute}); !ok {
		t.Fatal("shared acquire")
	}
	if ok, _ := a.Reassign(c, []string{"r"}, []string{"reader"}, "new", time.Second); ok {
		t.Fatal("a shared hold changed hands")
	}
	if _, err := a.Reassign(c, []string{"r"}, []string{"reader"}, "new", 0); !errors.Is(err, lockmap.ErrBadTTL) {
		t.Fatalf("reassign without a TTL: %v", err)
	}
}

// TestExtendTakesTheTokenLiterally: an empty token names the holds taken
// with an empty token, never every holder; ExtendAny (PEXPIRE) does that.
func TestExtendTakesTheTokenLiterally(t *testing.T) {
	a, _ := twoProxies(t, 1<<12)
	c := ctx(t)
	if _, ok, _ := a.Acquire(c, []string{"k"}, "holder", excl(time.Minute, 0)); !ok {
		t.Fatal("acquire")
	}
	if ok, _ := a.Extend(c, "k", "", time.Second); ok {
		t.Fatal("an empty token extended another token's hold")
	}
	if ok, _ := a.Extend(c, "k", "", 0); ok || holder(t, a, "k").TTL <= time.Second {
		t.Fatal("an empty token deleted or changed another token's hold")
	}
	if ok, _ := a.ExtendAny(c, "k", time.Second); !ok || holder(t, a, "k").TTL > time.Second {
		t.Fatal("ExtendAny")
	}
	if _, ok, _ := a.Acquire(c, []string{"e"}, "", excl(time.Minute, 0)); !ok {
		t.Fatal("acquire with an empty token")
	}
	if ok, _ := a.Extend(c, "e", "", time.Second); !ok {
		t.Fatal("the empty token's own hold")
	}
}

// TestWaitPolicyLetsRetriesWait: under "auto", a first try does not wait; a
// retry of the same key and token waits, no longer than the client waited
// before retrying, nor than the TTL's fraction, and the connection learns
// that: its later first tries wait the TTL's fraction (on 84479b5 they
// waited only as long as its last retry had, which cost redsync's hot-key
// transactions a p999 four times a08ef0d's in bench-bank); a fixed rule
// applies to every try; WaitFirstTry restores waiting on first tries.
func TestWaitPolicyLetsRetriesWait(t *testing.T) {
	var r lockmap.Retries
	var fresh, retrier lockmap.Habit
	p := lockmap.WaitPolicy{Rules: []lockmap.WaitRule{{Pattern: "fixed:*", Wait: 3 * time.Second}}}
	if b := p.BudgetFor(&r, &retrier, "k", "tok", 10*time.Second); b != 0 {
		t.Fatalf("first try: budget %v, want 0", b)
	}
	r.Refused("k", "tok")
	time.Sleep(30 * time.Millisecond)
	b := p.BudgetFor(&r, &retrier, "k", "tok", 10*time.Second)
	if b < 30*time.Millisecond || b > 400*time.Millisecond {
		t.Fatalf("retry 30 ms after the refusal: budget %v, want about 30 ms", b)
	}
	if got := p.BudgetFor(&r, &retrier, "k2", "tok2", 10*time.Second); got != 400*time.Millisecond {
		t.Fatalf("a first try on a connection that retried after %v: budget %v, want 4%% of the TTL", b, got)
	}
	r.Refused("k3", "tok3")
	if got := p.BudgetFor(&r, &retrier, "k3", "tok3", 10*time.Second); got >= 400*time.Millisecond {
		t.Fatalf("a retry on that connection right after its refusal: budget %v, want its own gap, not 4%% of the TTL", got)
	}
	if got := p.BudgetFor(&r, &fresh, "k", "other", 10*time.Second); got != 0 {
		t.Fatalf("another token's first try on a fresh connection: budget %v", got)
	}
	if got := p.BudgetFor(&r, &fresh, "k", "tok", 100*time.Millisecond); got != 4*time.Millisecond {
		t.Fatalf("retry with a 100 ms TTL: budget %v, want 4%% of it", got)
	}
	if got := p.BudgetFor(&r, &fresh, "fixed:a", "x", time.Minute); got != 3*time.Second {
		t.Fatalf("fixed rule, first try: %v", got)
	}
	var patient lockmap.Habit
	patient.Patient()
	r.Refused("k4", "tok4")
	if got := p.BudgetFor(&r, &patient, "k4", "tok4", 10*time.Second); got != 400*time.Millisecond {
		t.Fatalf("a retry on a connection whose client bounds its tries itself: budget %v, want 4%% of the TTL", got)
	}
	if got := p.BudgetFor(&r, &patient, "k5", "tok5", 10*time.Second); got != 400*time.Millisecond {
		t.Fatalf("a first try on that connection: budget %v, want 4%% of the TTL", got)
	}
	p.WaitFirstTry = true
	if got := p.BudgetFor(&r, nil, "k", "new", 10*time.Second); got != 400*time.Millisecond {
		t.Fatalf("WaitFirstTry: budget %v, want 4%% of the TTL", got)
	}
}
