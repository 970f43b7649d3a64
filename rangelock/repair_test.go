package rangelock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rangelock"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
)

func testTree(t *testing.T, depth int) (rangelock.Tree, *memnode.Server, *memfab.Fabric) {
	t.Helper()
	tree, err := rangelock.NewTree(rdma.Addr{Region: rdma.RegionRanges}, depth)
	if err != nil {
		t.Fatal(err)
	}
	// No heartbeats here: members must not be declared dead.
	host := memnode.New(memnode.Config{Entries: 16, RangeBytes: tree.Bytes(), DeadAfter: time.Hour})
	t.Cleanup(host.Close)
	return tree, host, memfab.New(host)
}

// TestTryAcquire: a try grants whenever no conflicting span is held, and
// answers ErrBusy at once when one is.
func TestTryAcquire(t *testing.T) {
	tree, host, fab := testTree(t, 3)
	ep1, _ := fab.Join("a")
	ep2, _ := fab.Join("b")
	a := rangelock.New(ep1, tree, rangelock.Config{FastPath: true})
	b := rangelock.New(ep2, tree, rangelock.Config{FastPath: true})
	ctx := context.Background()
	try := func(lk *rangelock.Locker, l, r uint64, m rangelock.Mode) *rangelock.Held {
		t.Helper()
		h, err := lk.TryAcquire(ctx, l, r, m)
		if err != nil && !errors.Is(err, rangelock.ErrBusy) {
			t.Fatal(err)
		}
		return h
	}
	cases := []struct {
		l, r uint64
		mode rangelock.Mode
	}{{10, 20, rangelock.Exclusive}, {0, 4096, rangelock.Exclusive}, {100, 900, rangelock.Exclusive}, {0, 1, rangelock.Shared}, {5, 3000, rangelock.Shared}}
	for _, c := range cases {
		h := try(a, c.l, c.r, c.mode)
		if h == nil {
			t.Fatalf("try [%d,%d) %v on an idle tree: busy", c.l, c.r, c.mode)
		}
		if o := try(b, c.l, c.r, rangelock.Exclusive); o != nil {
			t.Fatalf("a writer's try granted inside [%d,%d) %v", c.l, c.r, c.mode)
		}
		if o := try(b, c.l, c.r, rangelock.Shared); (o != nil) != (c.mode == rangelock.Shared) {
			t.Fatalf("a reader's try inside [%d,%d) %v: granted %v", c.l, c.r, c.mode, o != nil)
		} else if o != nil {
			_ = o.Release(ctx)
		}
		_ = h.Release(ctx)
	}
	// Beside a held span that shares no node with it.
	h := try(a, 0, 10, rangelock.Exclusive)
	if o := try(b, 3000, 3010, rangelock.Exclusive); o == nil || h == nil {
		t.Fatal("a try far from a held span was refused")
	} else {
		_ = o.Release(ctx)
	}
	_ = h.Release(ctx)
	// Readers trying one node at once all get it.
	var wg sync.WaitGroup
	var busy atomic.Int32
	held := make(chan *rangelock.Held, 16)
	for i := 0; i < 16; i++ {
		ep, _ := fab.Join(fmt.Sprint(i))
		lk := rangelock.New(ep, tree, rangelock.Config{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := lk.TryAcquire(ctx, 0, 2000, rangelock.Shared)
			if err != nil {
				busy.Add(1)
				return
			}
			held <- h
		}()
	}
	wg.Wait()
	close(held)
	for h := range held {
		_ = h.Release(ctx)
	}
	if busy.Load() > 0 {
		t.Fatalf("%d of 16 readers trying one span at once were refused", busy.Load())
	}
	if err := rangelock.TreeBalanced(tree, host.Region(rdma.RegionRanges)); err != nil {
		t.Fatal(err)
	}
}

// TestAbort: a request waiting behind a holder gives up when its Locker is
// aborted, posts nothing afterwards, and later requests fail at once.
func TestAbort(t *testing.T) {
	tree, host, fab := testTree(t, 3)
	ep1, _ := fab.Join("a")
	ep2, _ := fab.Join("b")
	a := rangelock.New(ep1, tree, rangelock.Config{})
	b := rangelock.New(ep2, tree, rangelock.Config{})
	ctx := context.Background()
	h, err := a.Acquire(ctx, 0, 4096, rangelock.Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 2)
	for _, span := range [][2]uint64{{10, 20}, {100, 900}} {
		go func() {
			_, err := b.Acquire(ctx, span[0], span[1], rangelock.Exclusive)
			errc <- err
		}()
	}
	time.Sleep(20 * time.Millisecond)
	b.Abort()
	for range 2 {
		if err := <-errc; !errors.Is(err, rangelock.ErrAborted) {
			t.Fatalf("a waiting request after Abort: %v", err)
		}
	}
	before := ep2.Counters().Snapshot()
	time.Sleep(20 * time.Millisecond)
	if after := ep2.Counters().Snapshot(); after != before {
		t.Fatalf("an aborted Locker still posts verbs: %+v then %+v", before, after)
	}
	if _, err := b.Acquire(ctx, 0, 1, rangelock.Exclusive); !errors.Is(err, rangelock.ErrAborted) {
		t.Fatalf("acquire on an aborted Locker: %v", err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = host
}

// TestRepairKeepsSpansApart: clients lock random spans while, over and
// over, the tree is repaired as a memory node does after a user's death:
// every Locker is aborted, the nodes zeroed, and every held span put back
// (Held.Reapply); then clients go on with new Lockers. No unit is ever
// held in conflicting modes, fencing tokens order conflicting grants, and
// once everything is released the tree is at rest: what Reapply put back
// is exactly what the releases take away.
func TestRepairKeepsSpansApart(t *testing.T) {
	tree, host, fab := testTree(t, 3)
	mem := host.Region(rdma.RegionRanges)
	const clients = 12
	type client struct {
		ep   rdma.Endpoint
		mu   sync.Mutex
		lk   *rangelock.Locker
		held map[*rangelock.Held]bool
	}
	cs := make([]*client, clients)
	for i := range cs {
		ep, err := fab.Join(fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = &client{ep: ep, lk: rangelock.New(ep, tree, rangelock.Config{FastPath: true}), held: map[*rangelock.Held]bool{}}
	}
	// frozen is held for writing during a repair: clients hold it for
	// reading while they post verbs and record what they hold.
	var frozen sync.RWMutex
	units := make([]unit, tree.Units())
	var hist history
	var overlaps, granted, repairs atomic.Int64
	// The run ends once it has seen enough of both, however slow the
	// machine; a protocol that gets stuck fails at the 60 s mark.
	const wantGrants, wantRepairs = 300, 10
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 35))
			for ctx.Err() == nil {
				l := r.Uint64N(tree.Units())
				n := 1 + r.Uint64N(300)
				if r.IntN(20) == 0 {
					l, n = 0, tree.Units()
				}
				hi := min(l+n, tree.Units())
				mode := rangelock.Exclusive
				if r.IntN(3) == 0 {
					mode = rangelock.Shared
				}
				// An acquire and the recording of its grant are one step
				// for a repair: it waits for both.
				frozen.RLock()
				c.mu.Lock()
				lk := c.lk
				c.mu.Unlock()
				h, err := lk.Acquire(ctx, l, hi, mode)
				if err == nil {
					c.mu.Lock()
					c.held[h] = true
					c.mu.Unlock()
				}
				frozen.RUnlock()
				if errors.Is(err, rangelock.ErrAborted) {
					continue // a repair: the new Locker is there once it is over
				}
				if err != nil {
					return // the run is over
				}
				at := time.Now()
				for u := l; u < hi; u++ {
					if !units[u].mark(mode) {
						overlaps.Add(1)
					}
				}
				time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
				for u := l; u < hi; u++ {
					units[u].unmark(mode)
				}
				hist.add(op{l: l, r: hi, mode: mode, token: h.Token(), granted: at, released: time.Now()})
				granted.Add(1)
				frozen.RLock()
				c.mu.Lock()
				delete(c.held, h)
				c.mu.Unlock()
				err = h.Release(context.Background())
				frozen.RUnlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	// The repairer.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			// Requests waiting behind holders give up first; then the
			// repair waits for every acquire in flight to be recorded.
			for _, c := range cs {
				c.mu.Lock()
				lk := c.lk
				c.mu.Unlock()
				lk.Abort()
			}
			frozen.Lock()
			zeros := make([]byte, tree.Bytes()-16)
			if err := mem.Write(16, zeros); err != nil {
				t.Error(err)
			}
			for _, c := range cs {
				var b rdma.Batch
				c.mu.Lock()
				for h := range c.held {
					h.Reapply(&b)
				}
				c.lk = rangelock.New(c.ep, tree, rangelock.Config{FastPath: true})
				c.mu.Unlock()
				if b.Len() > 0 {
					if err := c.ep.Post(context.Background(), &b); err != nil || b.FirstErr() != nil {
						t.Errorf("reapply: %v %v", err, b.FirstErr())
					}
				}
			}
			repairs.Add(1)
			frozen.Unlock()
			if repairs.Load() >= wantRepairs && granted.Load() >= wantGrants {
				cancel()
			}
		}
	}()
	wg.Wait()
	t.Logf("%d grants, %d repairs", granted.Load(), repairs.Load())
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("%d units held in conflicting modes at once", n)
	}
	if n := hist.fenceInversions(); n > 0 {
		t.Fatalf("%d fencing inversions", n)
	}
	if granted.Load() < wantGrants || repairs.Load() < wantRepairs {
		t.Fatalf("only %d grants and %d repairs", granted.Load(), repairs.Load())
	}
	// Requests aborted by the last repair left tickets nobody passes on;
	// a last repair with nothing held clears them, as a memory node's does.
	for _, c := range cs {
		c.lk.Abort()
	}
	if err := rangelock.TreeBalanced(tree, mem); err == nil {
		t.Log("the tree was at rest without a last repair")
	}
	_ = mem.Write(16, make([]byte, tree.Bytes()-16))
	// Now a tree rebuilt from held spans, released, must be at rest.
	lk := rangelock.New(cs[0].ep, tree, rangelock.Config{FastPath: true})
	var hs []*rangelock.Held
	for _, s := range [][3]uint64{{0, 10, 0}, {300, 600, 0}, {1024, 2048, 1}, {1100, 1200, 1}, {3000, 3001, 1}, {3500, 3564, 0}, {2048, 2304, 0}} {
		h, err := lk.TryAcquire(context.Background(), s[0], s[1], rangelock.Mode(s[2]))
		if err != nil {
			t.Fatalf("[%d,%d): %v", s[0], s[1], err)
		}
		hs = append(hs, h)
	}
	_ = mem.Write(16, make([]byte, tree.Bytes()-16))
	var b rdma.Batch
	for _, h := range hs {
		h.Reapply(&b)
	}
	if err := cs[0].ep.Post(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if _, err := lk.TryAcquire(context.Background(), 5, 6, rangelock.Exclusive); !errors.Is(err, rangelock.ErrBusy) {
		t.Fatalf("a span inside a reapplied one: %v", err)
	}
	for _, h := range hs {
		if err := h.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := rangelock.TreeBalanced(tree, mem); err != nil {
		t.Fatalf("a rebuilt tree, all released: %v", err)
	}
}

// lossyEndpoint applies every verb but reports the post number failAt as
// failed, as a connection that breaks after the memory node executed a
// batch and before its reply came back would.
type lossyEndpoint struct {
	rdma.Endpoint
	posts, failAt atomic.Int32
}

func (e *lossyEndpoint) Post(ctx context.Context, b *rdma.Batch) error {
	err := e.Endpoint.Post(ctx, b)
	if e.posts.Add(1) == e.failAt.Load() {
		return fmt.Errorf("%w: reply lost", rdma.ErrUnreachable)
	}
	return err
}

// TestUncertainVerbIsReported: a verb that changes the tree and fails with
// its outcome unknown is reported (Config.OnUncertain), since the tree may
// now hold what nobody will undo: here a node occupied by a request that
// answered an error. A repair with nothing held brings the tree back to
// rest.
func TestUncertainVerbIsReported(t *testing.T) {
	tree, host, fab := testTree(t, 3)
	ep, _ := fab.Join("a")
	lossy := &lossyEndpoint{Endpoint: ep}
	var reported atomic.Int32
	lk := rangelock.New(lossy, tree, rangelock.Config{OnUncertain: func(error) { reported.Add(1) }})
	// [100, 900) takes an internal node: its second post occupies it.
	lossy.failAt.Store(2)
	if _, err := lk.Acquire(context.Background(), 100, 900, rangelock.Exclusive); err == nil {
		t.Fatal("an acquire whose occupying batch failed succeeded")
	}
	if reported.Load() == 0 {
		t.Fatal("a tree-changing verb with an unknown outcome was not reported")
	}
	mem := host.Region(rdma.RegionRanges)
	if err := rangelock.TreeBalanced(tree, mem); err == nil {
		t.Fatal("the lost reply left the tree at rest: the test did not lose a tree-changing verb")
	}
	_ = mem.Write(16, make([]byte, tree.Bytes()-16))
	if err := rangelock.TreeBalanced(tree, mem); err != nil {
		t.Fatal(err)
	}
	if _, err := rangelock.New(ep, tree, rangelock.Config{}).TryAcquire(context.Background(), 100, 900, rangelock.Exclusive); err != nil {
		t.Fatalf("after the repair: %v", err)
	}
}

// TestTryWaitsForARequestOnItsWay: a request that holds a node's turn
// without occupying it, while no ancestor is occupied, is only on its way
// (a client descheduled under load). A try behind it waits, however long
// that takes beyond its patience, and is granted: nothing holds what it
// wants. Behind a request that may be waiting for an occupied ancestor it
// answers busy. (CI on a loaded machine refused 10 of TestTryAcquire's 16
// concurrent readers: each waited 5 T_wait for a reader ahead, then gave up.)
func TestTryWaitsForARequestOnItsWay(t *testing.T) {
	tree, host, fab := testTree(t, 3)
	ctx := context.Background()
	// A span whose readers take one internal node below the root.
	var l, r, x uint64
	for l, r = 0, tree.Units(); ; r /= 4 {
		if ns := tree.SplitShared(l, r); len(ns) == 1 && ns[0] > 1 && !tree.Leaf(ns[0]) {
			x = ns[0]
			break
		}
		if r < 4 {
			t.Fatal("no span takes one internal node below the root")
		}
	}
	ahead, _ := fab.Join("ahead")
	ep, _ := fab.Join("try")
	const patience = 5 * time.Millisecond
	lk := rangelock.New(ep, tree, rangelock.Config{TryPatience: patience})

	pass, err := rangelock.TakeTurn(ctx, ahead, tree, x)
	if err != nil {
		t.Fatal(err)
	}
	passed := make(chan error, 1)
	go func() {
		time.Sleep(10 * patience)
		passed <- pass()
	}()
	h, err := lk.TryAcquire(ctx, l, r, rangelock.Shared)
	if err != nil {
		t.Fatalf("a try behind a request on its way, nothing held: %v", err)
	}
	if err := <-passed; err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The root occupied by a reader: the request ahead may be a writer
	// waiting for it, which keeps new readers out.
	holder, _ := fab.Join("holder")
	root, err := rangelock.New(holder, tree, rangelock.Config{}).Acquire(ctx, 0, tree.Units(), rangelock.Shared)
	if err != nil {
		t.Fatal(err)
	}
	if pass, err = rangelock.TakeTurn(ctx, ahead, tree, x); err != nil {
		t.Fatal(err)
	}
	if h, err := lk.TryAcquire(ctx, l, r, rangelock.Shared); !errors.Is(err, rangelock.ErrBusy) {
		t.Fatalf("a try behind a request that may wait for an occupied ancestor: %v, want busy", err)
	} else if h != nil {
		_ = h.Release(ctx)
	}
	if err := pass(); err != nil {
		t.Fatal(err)
	}
	if err := root.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The refused try's ticket is passed on in the background.
	var rest error
	for range 1000 {
		if rest = rangelock.TreeBalanced(tree, host.Region(rdma.RegionRanges)); rest == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if rest != nil {
		t.Fatal(rest)
	}
}

// slowPosts delays the first n batches posted through it: every round of a
// request then takes longer than T_wait (inequation 1) and starts over.
type slowPosts struct {
	rdma.Endpoint
	n     atomic.Int32
	delay time.Duration
}

func (s *slowPosts) Post(ctx context.Context, b *rdma.Batch) error {
	if s.n.Add(-1) >= 0 {
		time.Sleep(s.delay)
	}
	return s.Endpoint.Post(ctx, b)
}

// TestTryOutlastsSlowRounds: a try whose rounds are slow, not in conflict
// (a client descheduled between reading the ancestors and occupying its
// node), starts over rather than answering busy after maxTryRounds: with
// nothing held, busy is false. It used to give up after 8 rounds.
func TestTryOutlastsSlowRounds(t *testing.T) {
	tree, host, fab := testTree(t, 3)
	ctx := context.Background()
	ep, _ := fab.Join("slow")
	slow := &slowPosts{Endpoint: ep, delay: 4 * time.Millisecond}
	slow.n.Store(60) // well over 8 rounds of a few posts each
	lk := rangelock.New(slow, tree, rangelock.Config{Wait: 2 * time.Millisecond})
	h, err := lk.TryAcquire(ctx, 0, tree.Units()/4, rangelock.Shared)
	if err != nil {
		t.Fatalf("a try on an idle tree whose rounds are only slow: %v (%d rounds lost)", err, lk.Stats().Aborts)
	}
	t.Logf("granted after %d rounds lost to slowness", lk.Stats().Aborts)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rangelock.TreeBalanced(tree, host.Region(rdma.RegionRanges)); err != nil {
		t.Fatal(err)
	}
}
