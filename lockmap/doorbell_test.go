package lockmap_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/lockmap/maptest"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

type outcome struct {
	fence uint64
	ok    bool
	err   error
}

func acquireAsync(m *lockmap.Map, d *lockmap.Doorbell, key, token string, wait time.Duration) chan outcome {
	ch := make(chan outcome, 1)
	m.AcquireAsync(d, context.Background(), key, token, excl(time.Minute, wait), func(f uint64, ok bool, err error) {
		ch <- outcome{f, ok, err}
	})
	return ch
}

// doorbellCosts rings n uncontended acquires, then their n releases: two
// round trips and 2n atomics in all, and nothing else.
func doorbellCosts(t *testing.T, m *lockmap.Map, ep rdma.Endpoint) {
	t.Helper()
	const n = 16
	d := m.NewDoorbell()
	before := ep.Counters().Snapshot()
	var chs []chan outcome
	for i := 0; i < n; i++ {
		chs = append(chs, acquireAsync(m, d, fmt.Sprint("db:", i), "tok", time.Second))
	}
	for _, ch := range chs {
		select {
		case <-ch:
			t.Fatal("an acquire completed before the doorbell rang")
		default:
		}
	}
	d.Ring(ctx(t))
	for i, ch := range chs {
		select {
		case o := <-ch:
			if !o.ok || o.err != nil || o.fence == 0 {
				t.Fatalf("acquire %d: %+v", i, o)
			}
		default:
			t.Fatalf("uncontended acquire %d did not complete in Ring", i)
		}
	}
	for i := 0; i < n; i++ {
		if !m.ReleaseAsync(d, fmt.Sprint("db:", i), "tok") {
			t.Fatalf("release %d: not held", i)
		}
		if m.ReleaseAsync(d, fmt.Sprint("db:", i), "tok") {
			t.Fatalf("release %d twice", i)
		}
	}
	d.Ring(ctx(t))
	diff := ep.Counters().Snapshot().Sub(before)
	if diff.OutAtomics() != 2*n || diff.Out[rdma.VerbBatch] != 2 || diff.Out[rdma.VerbRead] != 0 || diff.Out[rdma.VerbWrite] != 0 || diff.Out[rdma.VerbSend] != 0 {
		t.Fatalf("%d acquires and releases cost %v; want %d atomics in 2 round trips", n, diff.Out, 2*n)
	}
	for i := 0; i < n; i++ {
		if in, _ := m.Lookup(ctx(t), fmt.Sprint("db:", i)); in.State != lockmap.Free {
			t.Fatalf("key %d %v after release", i, in.State)
		}
	}
}

func TestDoorbellCostsMemfab(t *testing.T) {
	m, _ := embeddedPair(t)
	doorbellCosts(t, m, m.Domains()[0].Client.Endpoint())
}

func TestDoorbellCostsTCP(t *testing.T) {
	m, ep := maptest.Network(t, shiftlock.Config{OwnerTags: true})
	doorbellCosts(t, m, ep)
}

// TestDoorbellLaunch: Launch without patience posts without waiting, and the
// completions run only when the owner runs what comes back; with patience,
// an answer in time completes during Launch. A memory node gets one batch at
// a time: what is staged while one is out goes when its answer is in, and
// After waits for exactly what was staged between the last Mark and it.
func TestDoorbellLaunch(t *testing.T) {
	m, ep := maptest.Network(t, shiftlock.Config{})
	d := m.NewDoorbell()
	back := make(chan func(), 4)
	queue := func(f func()) { back <- f }
	next := func() func() {
		t.Helper()
		select {
		case f := <-back:
			return f
		case <-time.After(time.Minute):
			t.Fatal("a launched batch never came back")
			return nil
		}
	}
	batches := func(before rdma.Snapshot) uint64 {
		return ep.Counters().Snapshot().Sub(before).Out[rdma.VerbBatch]
	}
	before := ep.Counters().Snapshot()
	first := acquireAsync(m, d, "launch:1", "tok", time.Second)
	var afterFirst, afterSecond bool
	d.After(func() { afterFirst = true })
	d.Launch(ctx(t), 0, queue)
	if d.Pending() {
		t.Fatal("a launched batch is still pending")
	}
	d.Mark()
	second := acquireAsync(m, d, "launch:2", "tok", time.Second)
	d.After(func() { afterSecond = true })
	d.Mark()
	unrelated := false
	d.After(func() { unrelated = true }) // nothing staged since the Mark
	if !unrelated {
		t.Fatal("After waited for operations staged before the last Mark")
	}
	d.Launch(ctx(t), 0, queue) // the memory node has the first batch: this one waits
	if !d.Pending() {
		t.Fatal("a batch went out while the memory node had one out")
	}

	land := next()
	if n := batches(before); n != 1 {
		t.Fatalf("%d batches posted with the first one out; want 1", n)
	}
	select {
	case o := <-first:
		t.Fatalf("an acquire completed before the owner ran its answer: %+v", o)
	default:
	}
	if afterFirst {
		t.Fatal("After ran before the owner ran the answer")
	}
	land()
	if o := <-first; !o.ok || o.err != nil {
		t.Fatalf("first acquire: %+v", o)
	}
	if !afterFirst || afterSecond {
		t.Fatalf("after the first answer: After(first) %v, After(second) %v; want true, false", afterFirst, afterSecond)
	}
	if d.Pending() {
		t.Fatal("the second batch did not go out when the first came back")
	}
	next()()
	if o := <-second; !o.ok || o.err != nil {
		t.Fatalf("second acquire: %+v", o)
	}
	if !afterSecond || batches(before) != 2 {
		t.Fatalf("After(second) %v, %d batches; want true, 2", afterSecond, batches(before))
	}
	// With nothing staged, After runs at once.
	ran := false
	d.After(func() { ran = true })
	if !ran {
		t.Fatal("After with nothing staged did not run")
	}
	for _, k := range []string{"launch:1", "launch:2"} {
		if !m.ReleaseAsync(d, k, "tok") {
			t.Fatalf("release %s: not held", k)
		}
	}
	// Patience: the owner waits, and the answer completes in Launch.
	d.Launch(ctx(t), time.Minute, func(func()) { t.Error("an answer within the patience went to back") })
	if d.Pending() {
		t.Fatal("staged after a patient Launch")
	}
	for _, k := range []string{"launch:1", "launch:2"} {
		if in, _ := m.Lookup(ctx(t), k); in.State != lockmap.Free {
			t.Fatalf("%s %v after the launched release", k, in.State)
		}
	}
}

// TestDoorbellWaitsAndTries: an acquire that finds the key held waits on
// its own goroutine and is handed the lock; a try-only one answers "no"
// during the ring.
func TestDoorbellWaitsAndTries(t *testing.T) {
	a, b := embeddedPair(t)
	c := ctx(t)
	if _, ok, _ := a.Acquire(c, []string{"w"}, "holder", excl(time.Minute, 0)); !ok {
		t.Fatal("setup")
	}
	d := b.NewDoorbell()
	waiting := acquireAsync(b, d, "w", "waiter", 10*time.Second)
	trying := acquireAsync(b, d, "w", "trier", 0)
	d.Ring(c)
	if o := <-trying; o.ok || o.err != nil {
		t.Fatalf("try on a held key: %+v", o)
	}
	select {
	case o := <-waiting:
		t.Fatalf("the waiter completed while the key was held: %+v", o)
	case <-time.After(20 * time.Millisecond):
	}
	a.Release("w", "holder")
	if o := <-waiting; !o.ok || o.err != nil {
		t.Fatalf("waiter: %+v", o)
	}
	if !b.ReleaseAsync(d, "w", "waiter") {
		t.Fatal("release")
	}
	d.Ring(c)
}

// TestDoorbellMutualExclusion plays an event loop: one goroutine starts
// every client's acquires and releases on a doorbell and rings it once per
// pass, while clients contend for a few keys. Nobody is ever inside a key
// twice, and every acquire ends.
func TestDoorbellMutualExclusion(t *testing.T) {
	m, other := embeddedPair(t)
	type req struct {
		key, token string
		release    bool
		done       chan outcome
	}
	reqs := make(chan req, 64)
	stop := make(chan struct{})
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		d := m.NewDoorbell()
		for {
			var r req
			select {
			case r = <-reqs:
			case <-stop:
				return
			}
			for more := true; more; {
				if r.release {
					ok := m.ReleaseAsync(d, r.key, r.token)
					r.done <- outcome{ok: ok}
				} else {
					done := r.done
					m.AcquireAsync(d, context.Background(), r.key, r.token, excl(time.Minute, 5*time.Second), func(f uint64, ok bool, err error) {
						done <- outcome{f, ok, err}
					})
				}
				select {
				case r = <-reqs:
				default:
					more = false
				}
			}
			d.Ring(context.Background())
		}
	}()
	var inside [3]atomic.Int32
	var bad atomic.Int32
	var wg sync.WaitGroup
	for w := 0; w < 24; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for n := 0; n < 40; n++ {
				k := (w + n) % 3
				key, token := fmt.Sprint("mx:", k), fmt.Sprintf("w%d-%d", w, n)
				if w%6 == 0 {
					// Some clients use another proxy, blocking.
					if _, ok, err := other.Acquire(ctx(t), []string{key}, token, excl(time.Minute, 5*time.Second)); !ok || err != nil {
						t.Errorf("blocking acquire: %v %v", ok, err)
						return
					}
				} else {
					done := make(chan outcome, 1)
					reqs <- req{key: key, token: token, done: done}
					if o := <-done; !o.ok || o.err != nil {
						t.Errorf("async acquire: %+v", o)
						return
					}
				}
				if inside[k].Add(1) != 1 {
					bad.Add(1)
				}
				time.Sleep(50 * time.Microsecond)
				inside[k].Add(-1)
				if w%6 == 0 {
					other.Release(key, token)
				} else {
					done := make(chan outcome, 1)
					reqs <- req{key: key, token: token, release: true, done: done}
					if o := <-done; !o.ok {
						t.Error("release: not held")
					}
				}
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	<-loopDone
	if bad.Load() != 0 {
		t.Fatalf("%d times two clients were inside one key", bad.Load())
	}
}

// TestDoorbellHandsOn: what a doorbell cannot carry goes on as it stands
// on a goroutine (Doorbell.Go), and is answered as AcquireKey would: a
// reentrant refresh keeps its fence and needs no atomic, a shared acquire
// takes its entry once, and a key the token holds is refused at once.
func TestDoorbellHandsOn(t *testing.T) {
	m, _ := embeddedPair(t)
	c := ctx(t)
	ep := m.Domains()[0].Client.Endpoint()
	f1, ok, err := m.AcquireKey(c, "r", "me", excl(time.Second, 0))
	if !ok || err != nil {
		t.Fatal("setup", ok, err)
	}
	d := m.NewDoorbell()
	var spawned atomic.Int32
	d.Go = func(f func()) { spawned.Add(1); go f() }
	ask := func(key, token string, opt lockmap.AcquireOptions) outcome {
		t.Helper()
		ch := make(chan outcome, 1)
		m.AcquireAsync(d, c, key, token, opt, func(f uint64, ok bool, err error) { ch <- outcome{f, ok, err} })
		d.Ring(c)
		return <-ch
	}
	before := ep.Counters().Snapshot()
	re := excl(time.Minute, time.Second)
	re.Reentrant = true
	if o := ask("r", "me", re); !o.ok || o.err != nil || o.fence != f1 {
		t.Fatalf("reentrant refresh: %+v, want fence %d", o, f1)
	}
	if in, err := m.Lookup(c, "r"); err != nil || in.Holders[0].TTL < 30*time.Second {
		t.Fatalf("the refresh did not reset the TTL: %+v %v", in, err)
	}
	if d := ep.Counters().Snapshot().Sub(before); d.OutAtomics() != 0 {
		t.Fatalf("a refresh cost %d atomics", d.OutAtomics())
	}
	if o := ask("r", "me", excl(time.Minute, time.Second)); o.ok || o.err != nil {
		t.Fatalf("SET NX of a key the token holds: %+v, want not set", o)
	}
	before = ep.Counters().Snapshot()
	if o := ask("s", "reader", lockmap.AcquireOptions{Mode: shiftlock.Shared, TTL: time.Minute, Wait: time.Second}); !o.ok || o.err != nil {
		t.Fatalf("shared: %+v", o)
	}
	if d := ep.Counters().Snapshot().Sub(before); d.OutAtomics() != 1 {
		t.Fatalf("a shared acquire cost %d atomics, want 1", d.OutAtomics())
	}
	if spawned.Load() != 2 {
		t.Fatalf("%d acquires went on on a goroutine, want 2 (the refresh, the shared)", spawned.Load())
	}
}
