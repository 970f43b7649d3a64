package shiftlock_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// acquireAsync starts a tagged acquire and returns where its guard arrives.
func acquireAsync(ctx context.Context, c *shiftlock.Client, i, tag uint64) <-chan *shiftlock.Guard {
	ch := make(chan *shiftlock.Guard, 1)
	go func() {
		g, err := c.AcquireExclusiveTagged(ctx, i, tag)
		if err != nil {
			g = nil
		}
		ch <- g
	}()
	return ch
}

// TestTagsCostNoVerb: with owner recognition on, an uncontended tagged
// acquire and release are one atomic each and nothing else, and so is a try;
// a handover between different owners costs the releasing holder one FAA.
func TestTagsCostNoVerb(t *testing.T) {
	cl := newCluster(t, 2, 8, shiftlock.Config{OwnerTags: true})
	a, b := cl.clients[0], cl.clients[1]
	ctx := ctxT(t)
	before := a.Endpoint().Counters().Snapshot()
	g, err := a.AcquireExclusiveTagged(ctx, 1, 111)
	if err != nil {
		t.Fatal(err)
	}
	g.Vouch()
	g.Release(ctx)
	g, ok, _, err := a.TryExclusiveTagged(ctx, 1, 111)
	if !ok || err != nil {
		t.Fatal("try", ok, err)
	}
	g.Vouch()
	g.Release(ctx)
	d := a.Endpoint().Counters().Snapshot().Sub(before)
	if d.OutAtomics() != 4 || d.Out[rdma.VerbBatch] != 4 || d.Out[rdma.VerbRead] != 0 || d.Out[rdma.VerbWrite] != 0 || d.Out[rdma.VerbSend] != 0 {
		t.Fatalf("two tagged cycles cost %v; want 4 atomics in 4 round trips and nothing else", d.Out)
	}

	g, _ = a.AcquireExclusiveTagged(ctx, 1, 111)
	g.Vouch()
	got := acquireAsync(ctx, b, 1, 222)
	awaitSuccessor(t, g)
	before = a.Endpoint().Counters().Snapshot()
	g.Release(ctx)
	g2 := <-got
	d = a.Endpoint().Counters().Snapshot().Sub(before)
	if d.Out[rdma.VerbBatch] != 1 || d.OutAtomics() != 1 || d.Out[rdma.VerbWrite] != 0 || d.Out[rdma.VerbRead] != 0 {
		t.Fatalf("handover cost %v; want one FAA", d.Out)
	}
	if g2 == nil || g2.Pending() {
		t.Fatal("a different owner's writer must be granted the lock itself")
	}
	g2.Release(ctx)
}

// TestSameOwnerQueuedBehindHolder is the RedLock case: the same owner asks
// through a second node while its first request holds the lock. It is told
// at once, without waiting for the holder, and keeps its place in the queue
// until the holder passes the lock on.
func TestSameOwnerQueuedBehindHolder(t *testing.T) {
	cl := newCluster(t, 3, 8, shiftlock.Config{OwnerTags: true})
	a, b, c := cl.clients[0], cl.clients[1], cl.clients[2]
	ctx := ctxT(t)
	ga, err := a.AcquireExclusiveTagged(ctx, 2, 7)
	if err != nil {
		t.Fatal(err)
	}
	ga.Vouch()
	gb, err := b.AcquireExclusiveTagged(ctx, 2, 7)
	if err != nil || !gb.Pending() || gb.Token() != ga.Token() {
		t.Fatalf("same owner through b: err=%v pending=%v token %d want %d", err, gb != nil && gb.Pending(), gb.Token(), ga.Token())
	}
	gb.Vouch()
	// The chain goes on: c is behind b, which is pending and vouched.
	gc, err := c.AcquireExclusiveTagged(ctx, 2, 7)
	if err != nil || !gc.Pending() || gc.Token() != ga.Token() {
		t.Fatalf("same owner through c: err=%v", err)
	}
	// Another owner queues behind all three and gets nothing until each
	// has let go.
	other := acquireAsync(ctx, a, 2, 8)
	// Release out of order: the pending ones first. They return at once.
	gc.Release(ctx)
	gb.Release(ctx)
	select {
	case <-other:
		t.Fatal("another owner got the lock while the first still held it")
	case <-time.After(20 * time.Millisecond):
	}
	ga.Release(ctx)
	g := <-other
	if g == nil || g.Pending() || g.Token() <= ga.Token() {
		t.Fatalf("the next owner: %v", g)
	}
	g.Release(ctx)
	if e, _ := a.Read(ctx, 2); !e.Free() {
		t.Fatalf("entry not free after every release: %v", e)
	}
}

// TestSameOwnerWaitsForVouch: a holder nobody has vouched for (its caller
// may have given up) is not recognised until vouched; the question waits.
func TestSameOwnerWaitsForVouch(t *testing.T) {
	cl := newCluster(t, 2, 8, shiftlock.Config{OwnerTags: true})
	a, b := cl.clients[0], cl.clients[1]
	ctx := ctxT(t)
	ga, _ := a.AcquireExclusiveTagged(ctx, 3, 9)
	got := acquireAsync(ctx, b, 3, 9)
	awaitSuccessor(t, ga)
	select {
	case <-got:
		t.Fatal("recognised an unvouched holder")
	case <-time.After(20 * time.Millisecond):
	}
	ga.Vouch()
	gb := <-got
	if gb == nil || !gb.Pending() {
		t.Fatal("not recognised once vouched")
	}
	// The holder lets go first: the pending guard now holds the lock.
	ga.Release(ctx)
	for gb.Pending() {
		time.Sleep(time.Millisecond)
	}
	if gb.Token() <= ga.Token() {
		t.Fatalf("token after the lock arrived %d, holder's was %d", gb.Token(), ga.Token())
	}
	if _, ok, _ := a.TryExclusive(ctx, 3); ok {
		t.Fatal("the lock is free while the pending guard should hold it")
	}
	gb.Release(ctx)
	if e, _ := a.Read(ctx, 3); !e.Free() {
		t.Fatalf("entry not free: %v", e)
	}
}

// TestSameOwnerFoundUpTheQueue: between the holder and the same owner's
// second request stands another owner; the question walks past it.
func TestSameOwnerFoundUpTheQueue(t *testing.T) {
	cl := newCluster(t, 3, 8, shiftlock.Config{OwnerTags: true})
	a, b, c := cl.clients[0], cl.clients[1], cl.clients[2]
	ctx := ctxT(t)
	ga, _ := a.AcquireExclusiveTagged(ctx, 4, 1)
	ga.Vouch()
	mid := acquireAsync(ctx, c, 4, 2) // another owner, queued
	awaitSuccessor(t, ga)
	gb, err := b.AcquireExclusiveTagged(ctx, 4, 1)
	if err != nil || !gb.Pending() || gb.Token() != ga.Token() {
		t.Fatalf("same owner behind another one: err=%v", err)
	}
	gb.Release(ctx)
	ga.Release(ctx)
	g := <-mid
	if g == nil || g.Pending() {
		t.Fatal("the owner in the middle must get the lock itself")
	}
	g.Release(ctx)
	for i := 0; i < 1000; i++ {
		if e, _ := a.Read(ctx, 4); e.Free() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("entry never became free: the released pending guard did not pass the lock on")
}

// heldUnderTag42: a holds entry i under owner tag 42, vouched; b's try
// under the same tag finds it held, and e is the entry that try read.
func heldUnderTag42(t *testing.T, ctx context.Context, a, b *shiftlock.Client, i uint64) (ga *shiftlock.Guard, e shiftlock.Entry) {
	t.Helper()
	ga, _, _, _ = a.TryExclusiveTagged(ctx, i, 42)
	ga.Vouch()
	_, ok, e, err := b.TryExclusiveTagged(ctx, i, 42)
	if ok || err != nil {
		t.Fatal("try on a held entry", ok, err)
	}
	return ga, e
}

// TestQueryOwner: a try that finds the entry held asks the queue, at no
// memory-node cost, and learns the holder's token only for its own tag.
func TestQueryOwner(t *testing.T) {
	cl := newCluster(t, 2, 8, shiftlock.Config{OwnerTags: true})
	a, b := cl.clients[0], cl.clients[1]
	ctx := ctxT(t)
	before := b.Endpoint().Counters().Snapshot() // a's verbs are its own
	ga, e := heldUnderTag42(t, ctx, a, b, 5)
	tok, same := b.QueryOwner(ctx, 5, e.Tail(), 42, time.Second)
	if !same || tok != ga.Token() {
		t.Fatalf("query: %v %d, want the holder's token %d", same, tok, ga.Token())
	}
	if _, same := b.QueryOwner(ctx, 5, e.Tail(), 43, 20*time.Millisecond); same {
		t.Fatal("another tag recognised")
	}
	if d := b.Endpoint().Counters().Snapshot().Sub(before); d.OutAtomics() != 1 || d.Out[rdma.VerbRead] != 0 || d.Out[rdma.VerbWrite] != 0 {
		t.Fatalf("try plus queries cost %v; want the try's atomic only", d.Out)
	}
	ga.Release(ctx)
	if _, same := b.QueryOwner(ctx, 5, e.Tail(), 42, 20*time.Millisecond); same {
		t.Fatal("a released holder still recognised")
	}
}

// TestRetagMovesRecognition: a holder whose owner changed its token while
// holding the lock (a proxy's client re-obtained the key with new
// metadata) answers for the new tag only, also on the node where a question
// under the old tag had listed it, and a same-owner writer under the new
// tag is told so.
func TestRetagMovesRecognition(t *testing.T) {
	cl := newCluster(t, 2, 8, shiftlock.Config{OwnerTags: true})
	a, b := cl.clients[0], cl.clients[1]
	ctx := ctxT(t)
	ga, e := heldUnderTag42(t, ctx, a, b, 6)
	if _, same := b.QueryOwner(ctx, 6, e.Tail(), 42, time.Second); !same {
		t.Fatal("the holder's own tag not recognised") // and now it is listed under 42
	}
	ga.Retag(77)
	if _, same := b.QueryOwner(ctx, 6, e.Tail(), 42, time.Second); same {
		t.Fatal("the old tag still recognised after Retag")
	}
	if tok, same := b.QueryOwner(ctx, 6, e.Tail(), 77, time.Second); !same || tok != ga.Token() {
		t.Fatalf("the new tag: %v %d, want the holder's token %d", same, tok, ga.Token())
	}
	gb := <-acquireAsync(ctx, b, 6, 77)
	if gb == nil || !gb.Pending() || gb.Token() != ga.Token() {
		t.Fatal("a writer under the new tag must be told its owner holds the lock")
	}
	gb.Release(ctx)
	ga.Release(ctx)
}

// TestOwnersNeverShareTheLock: many owners, each asking through three nodes
// at once as RedLock clients do, with a deadline per attempt (a request
// that waits past it is abandoned and completes in the background) and
// random release orders. The lock itself is only ever held by one guard at
// a time, a pending guard is only handed out with a token that a vouched
// guard of its own owner was granted, and most attempts get all three
// answers although the owners' requests interleave in one queue.
func TestOwnersNeverShareTheLock(t *testing.T) {
	cl := newCluster(t, 3, 4, shiftlock.Config{OwnerTags: true, Threshold: 4})
	ctx := ctxT(t)
	var mu sync.Mutex
	holder := map[uint64]uint64{} // entry -> tag of the guard holding the lock itself
	vouched := map[[2]uint64]bool{}
	var attempts, full atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 24; w++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(id), 11))
			for n := 0; n < 40; n++ {
				i := uint64(r.IntN(2))
				tag := uint64(id*1000 + n + 1)
				attempts.Add(1)
				// Ask through every node at once, as a RedLock client asks
				// every instance.
				var gs [3]*shiftlock.Guard
				var inner sync.WaitGroup
				for k := range gs {
					inner.Add(1)
					go func(k int) {
						defer inner.Done()
						actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
						g, err := cl.clients[k].AcquireExclusiveTagged(actx, i, tag)
						cancel()
						if err != nil {
							return // abandoned: it completes and releases in the background
						}
						mu.Lock()
						if g.Pending() {
							if !vouched[[2]uint64{tag, g.Token()}] {
								t.Errorf("pending guard with token %d that no vouched guard of its owner had", g.Token())
							}
						} else {
							if h, held := holder[i]; held {
								t.Errorf("entry %d: owner %d got the lock while owner %d holds it", i, tag, h)
							}
							holder[i] = tag
						}
						vouched[[2]uint64{tag, g.Token()}] = true
						g.Vouch()
						mu.Unlock()
						gs[k] = g
					}(k)
				}
				inner.Wait()
				if gs[0] != nil && gs[1] != nil && gs[2] != nil {
					full.Add(1)
					time.Sleep(time.Duration(r.IntN(50)) * time.Microsecond)
				}
				for _, k := range r.Perm(3) {
					if gs[k] == nil {
						continue
					}
					mu.Lock()
					if !gs[k].Pending() && holder[i] == tag {
						delete(holder, i)
					}
					mu.Unlock()
					gs[k].Release(ctx)
				}
			}
		}(w)
	}
	wg.Wait()
	for _, c := range cl.clients {
		c.Close(context.Background())
	}
	for i := uint64(0); i < 2; i++ {
		if e, _ := cl.clients[0].Read(ctx, i); !e.Free() {
			t.Errorf("entry %d not free at the end: %v", i, e)
		}
	}
	t.Logf("%d of %d attempts got all three answers", full.Load(), attempts.Load())
	if full.Load() == 0 {
		t.Fatal("no attempt ever got all three answers: owners are not recognised")
	}
}

// TestSameOwnerFoundBeyondTheWalk: a RedLock burst can put many other
// owners between an owner's granted request and its next one, more than an
// owner question travels up the queue. The holder then waits for a quorum
// that its own queued requests can only give it after the holder let go:
// every client of the key stalls until its budget runs out. The question
// must find the holder anyway, through the holder's node, which it passes
// on its way up; also when the holder is vouched for only after the
// question passed.
func TestSameOwnerFoundBeyondTheWalk(t *testing.T) {
	for _, late := range []bool{false, true} {
		cl := newCluster(t, 3, 8, shiftlock.Config{OwnerTags: true})
		ctx := ctxT(t)
		const entry = 6
		ga, err := cl.clients[0].AcquireExclusiveTagged(ctx, entry, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !late {
			ga.Vouch()
		}
		// Others queue behind it, one after the other, on all three nodes,
		// so that the walk from the end crosses nodes at every step.
		wctx, cancel := context.WithCancel(ctx)
		var waiters []<-chan *shiftlock.Guard
		for k := 0; k < 2*shiftlock.MaxQueryHops; k++ {
			before, _ := cl.clients[0].Read(ctx, entry)
			waiters = append(waiters, acquireAsync(wctx, cl.clients[k%3], entry, uint64(100+k)))
			for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Microsecond) {
				if e, _ := cl.clients[0].Read(ctx, entry); e.Tail() != before.Tail() {
					break
				}
				if time.Now().After(end) {
					t.Fatal("a waiter never enqueued")
				}
			}
		}
		bctx, bcancel := context.WithTimeout(ctx, 2*time.Second)
		got := make(chan *shiftlock.Guard, 1)
		go func() {
			g, err := cl.clients[1].AcquireExclusiveTagged(bctx, entry, 1)
			if err != nil {
				g = nil
			}
			got <- g
		}()
		if late {
			time.Sleep(50 * time.Millisecond) // the question has passed by now
			ga.Vouch()
		}
		gb := <-got
		bcancel()
		if gb == nil || !gb.Pending() || gb.Token() != ga.Token() {
			t.Fatalf("vouched late %v: the same owner %d places behind its holder was not recognised", late, 2*shiftlock.MaxQueryHops)
		}
		gb.Release(ctx)
		ga.Release(ctx)
		cancel()
		for _, w := range waiters {
			if g := <-w; g != nil {
				g.Release(ctx)
			}
		}
	}
}

// TestDeadlineDoesNotRaceRecognition is issue 33 item 3 in one process: a
// chain of writers with one owner tag (a RedLock client asking three
// proxies at once) whose deadlines all pass before the holder at the head
// is vouched. A deadline is a budget for another owner's lock; that the
// lock is the writers' own owner's arrives by messages, which under load
// take as long as they take. Each writer must therefore be told, once the
// writer ahead is vouched, and not be refused because its deadline ran
// out first. A writer of another tag behind them is still refused at its
// deadline, told no by the queue rather than after OwnerAnswerWait.
func TestDeadlineDoesNotRaceRecognition(t *testing.T) {
	cl := newCluster(t, 4, 8, shiftlock.Config{OwnerTags: true, OwnerAnswerWait: time.Hour})
	a, b, c, d := cl.clients[0], cl.clients[1], cl.clients[2], cl.clients[3]
	ctx := ctxT(t)
	ga, err := a.AcquireExclusiveTagged(ctx, 3, 7) // granted, not yet vouched
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	gotB := acquireAsync(dctx, b, 3, 7)
	waitQueued(t, a, 3, b)
	gotC := acquireAsync(dctx, c, 3, 7)
	waitQueued(t, a, 3, c)
	other := make(chan error, 1)
	go func() {
		_, err := d.AcquireExclusiveTagged(dctx, 3, 8)
		other <- err
	}()
	waitQueued(t, a, 3, d)
	<-dctx.Done() // every deadline has passed; nobody was vouched yet
	if err := <-other; err == nil {
		t.Fatal("a writer of another owner was granted past its deadline")
	}
	ga.Vouch()
	gb := <-gotB
	if gb == nil || !gb.Pending() || gb.Token() != ga.Token() {
		t.Fatalf("the writer behind its owner's holder was refused at its deadline (guard %v)", gb)
	}
	gb.Vouch() // its proxy told its client
	gc := <-gotC
	if gc == nil || !gc.Pending() || gc.Token() != ga.Token() {
		t.Fatalf("the writer behind its owner's pending writer was refused at its deadline (guard %v)", gc)
	}
	gc.Release(ctx)
	gb.Release(ctx)
	ga.Release(ctx)
	for i := 0; i < 1000; i++ {
		if e, _ := a.Read(ctx, 3); e.Free() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("entry never became free after every writer let go")
}

// waitQueued waits until w's writer is the tail of entry i, as read
// through c: its enqueue has landed.
func waitQueued(t *testing.T, c *shiftlock.Client, i uint64, w *shiftlock.Client) {
	t.Helper()
	for k := 0; k < 5000; k++ {
		if e, err := c.Read(context.Background(), i); err == nil && e.Tail().Node == w.Endpoint().Node() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the writer of node %v never enqueued on entry %d", w.Endpoint().Node(), i)
}
