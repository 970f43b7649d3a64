package shiftlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
	"github.com/shiftlock/shiftlock-proxy/shiftlock/locktest"
)

type cluster struct {
	host    *memnode.Server
	fab     *memfab.Fabric
	clients []*shiftlock.Client
	eps     []*memfab.Endpoint
}

func newCluster(t testing.TB, nodes int, entries uint64, cfg shiftlock.Config) *cluster {
	t.Helper()
	host := memnode.New(memnode.Config{Entries: entries, DeadAfter: time.Hour})
	t.Cleanup(host.Close)
	cl := &cluster{host: host, fab: memfab.New(host)}
	for i := 0; i < nodes; i++ {
		ep, err := cl.fab.Join("node")
		if err != nil {
			t.Fatal(err)
		}
		cl.eps = append(cl.eps, ep)
		cl.clients = append(cl.clients, shiftlock.NewClient(ep, cfg))
	}
	return cl
}

func (cl *cluster) lockers() []shiftlock.Locker {
	ls := make([]shiftlock.Locker, len(cl.clients))
	for i, c := range cl.clients {
		ls[i] = c
	}
	return ls
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestUncontendedVerbCounts is the paper's G1: with no contention, every
// acquire and every release is exactly one atomic, and nothing else.
func TestUncontendedVerbCounts(t *testing.T) {
	cl := newCluster(t, 1, 64, shiftlock.Config{})
	c := cl.clients[0]
	ctx := ctxT(t)
	step := func(name string, f func()) {
		t.Helper()
		before := c.Endpoint().Counters().Snapshot()
		f()
		d := c.Endpoint().Counters().Snapshot().Sub(before)
		if d.OutAtomics() != 1 || d.Out[rdma.VerbBatch] != 1 || d.Out[rdma.VerbRead] != 0 || d.Out[rdma.VerbSend] != 0 {
			t.Errorf("%s: atomics=%d round trips=%d reads=%d sends=%d, want exactly one atomic in one round trip",
				name, d.OutAtomics(), d.Out[rdma.VerbBatch], d.Out[rdma.VerbRead], d.Out[rdma.VerbSend])
		}
	}
	var g *shiftlock.Guard
	var err error
	for round := 0; round < 3; round++ {
		step("exclusive acquire", func() { g, err = c.AcquireExclusive(ctx, 7) })
		if err != nil {
			t.Fatal(err)
		}
		step("exclusive release", func() { err = g.Release(ctx) })
		step("shared acquire", func() { g, err = c.AcquireShared(ctx, 7) })
		if err != nil {
			t.Fatal(err)
		}
		step("shared release", func() { err = g.Release(ctx) })
		step("try exclusive", func() { g, _, err = c.TryExclusive(ctx, 7) })
		step("try exclusive release", func() { err = g.Release(ctx) })
	}
	e, _ := c.Read(ctx, 7)
	if !e.Free() {
		t.Fatalf("entry not free after releases: %v", e)
	}
}

func TestTokensAndTryLock(t *testing.T) {
	cl := newCluster(t, 2, 16, shiftlock.Config{})
	a, b := cl.clients[0], cl.clients[1]
	ctx := ctxT(t)
	g1, err := a.AcquireExclusive(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := b.TryExclusive(ctx, 3); ok {
		t.Fatal("try-lock succeeded on a held entry")
	}
	if _, ok, _ := b.TryShared(ctx, 3); ok {
		t.Fatal("shared try-lock succeeded under a writer")
	}
	got := make(chan *shiftlock.Guard)
	go func() {
		g, err := b.AcquireExclusive(ctx, 3)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	awaitSuccessor(t, g1)
	before := a.Endpoint().Counters().Snapshot()
	if err := g1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g2 := <-got
	if d := a.Endpoint().Counters().Snapshot().Sub(before); d.Out[rdma.VerbSend] != 1 {
		t.Fatalf("cross-node handover should be one Send, saw %d", d.Out[rdma.VerbSend])
	}
	if g2.Token() <= g1.Token() {
		t.Fatalf("tokens must increase: %d then %d", g1.Token(), g2.Token())
	}
	r1, ok, err := a.TryShared(ctx, 4)
	if !ok || err != nil {
		t.Fatalf("shared try-lock on free entry: %v %v", ok, err)
	}
	r2, ok, _ := b.TryShared(ctx, 4)
	if !ok {
		t.Fatal("second shared try-lock failed")
	}
	if _, ok, _ := b.TryExclusive(ctx, 4); ok {
		t.Fatal("exclusive try-lock succeeded with readers inside")
	}
	r1.Release(ctx)
	r2.Release(ctx)
	g2.Release(ctx)
}

func runChecker(t *testing.T, cl *cluster, w locktest.Workload, starve uint64) {
	t.Helper()
	chk := locktest.NewChecker(w.Entries)
	chk.StarveBound = starve
	w.Clients = cl.lockers()
	res, err := locktest.Run(ctxT(t), w, chk)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cl.clients {
		if err := c.Close(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if chk.Violations() != 0 {
		t.Fatalf("%d violations, first: %v", chk.Violations(), chk.Report())
	}
	if res.Ops == 0 {
		t.Fatal("no operations completed")
	}
	// Once everything is released, every entry must be free again.
	for i := 0; i < w.Entries; i++ {
		e, err := cl.clients[0].Read(context.Background(), uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		if !e.Free() {
			t.Fatalf("entry %d left %v", i, e)
		}
	}
	t.Logf("%d ops, %d abandoned in %v", res.Ops, res.Abandoned, res.Elapsed)
}

func TestMutualExclusionHeavyContention(t *testing.T) {
	const threshold = 4
	cl := newCluster(t, 4, 8, shiftlock.Config{Threshold: threshold})
	runChecker(t, cl, locktest.Workload{
		Workers: 200, Entries: 4, ReadRatio: 0.5, Ops: 150, Seed: 1,
	}, threshold+1)
}

func TestMutualExclusionReadMostly(t *testing.T) {
	cl := newCluster(t, 3, 8, shiftlock.Config{})
	runChecker(t, cl, locktest.Workload{
		Workers: 120, Entries: 3, ReadRatio: 0.95, Ops: 200, Seed: 2,
	}, 16+1)
}

func TestMutualExclusionLightContention(t *testing.T) {
	cl := newCluster(t, 4, 1024, shiftlock.Config{})
	runChecker(t, cl, locktest.Workload{
		Workers: 200, Entries: 1000, Zipf: 1.2, ReadRatio: 0.5, Ops: 100, Seed: 3,
	}, 16+1)
}

// TestMutualExclusionWithAbandonedWaits gives many acquisitions a deadline
// that expires while they are queued: the queue must survive, and nobody may
// enter early.
func TestMutualExclusionWithAbandonedWaits(t *testing.T) {
	cl := newCluster(t, 3, 8, shiftlock.Config{Threshold: 4})
	runChecker(t, cl, locktest.Workload{
		Workers: 120, Entries: 3, ReadRatio: 0.5, Ops: 150, CancelRatio: 0.3, Seed: 4,
		Hold: 20 * time.Microsecond,
	}, 0)
}

// earlyReleaseScenario builds the interleaving the design warns about: an
// old reader holds, a writer queues behind it, and a new reader that queued
// behind the writer gives up. It reports whether the writer got in while the
// old reader was still inside. With broken set, the writer is expected in
// early, and the old reader stays inside until it is (no fixed sleep that a
// loaded host could outlast).
func earlyReleaseScenario(t *testing.T, cfg shiftlock.Config, broken bool) (violations uint64) {
	cl := newCluster(t, 3, 4, cfg)
	old, writer, late := cl.clients[0], cl.clients[1], cl.clients[2]
	ctx := ctxT(t)
	chk := locktest.NewChecker(1)
	r0, err := old.AcquireShared(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	chk.Enter(0, true, r0.Token(), 0)
	var wg sync.WaitGroup
	wg.Add(1)
	entered := make(chan struct{})
	go func() {
		defer wg.Done()
		g, err := writer.AcquireExclusive(ctx, 0)
		if err != nil {
			t.Error(err)
			return
		}
		chk.Enter(0, false, g.Token(), 0)
		close(entered)
		chk.Exit(0, false)
		g.Release(ctx)
	}()
	// Wait until the writer is queued.
	for {
		e, _ := old.Read(ctx, 0)
		if !e.Tail().IsZero() {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// The late reader counts itself in behind the writer, then gives up.
	short, cancel := context.WithCancel(ctx)
	lateErr := make(chan error, 1)
	go func() {
		_, err := late.AcquireShared(short, 0)
		lateErr <- err
	}()
	for {
		e, _ := old.Read(ctx, 0)
		if e.Readers() >= 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-lateErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("late reader: %v, want canceled", err)
	}
	if broken {
		select {
		case <-entered:
		case <-time.After(30 * time.Second):
			t.Fatal("the broken variant never let the writer in")
		}
	} else {
		time.Sleep(50 * time.Millisecond) // room for a wrongly admitted writer
	}
	chk.Exit(0, true)
	r0.Release(ctx)
	wg.Wait()
	for _, c := range cl.clients {
		c.Close(ctx)
	}
	return chk.Violations()
}

func TestAbandonedReaderDoesNotAdmitWriterEarly(t *testing.T) {
	if v := earlyReleaseScenario(t, shiftlock.Config{}, false); v != 0 {
		t.Fatalf("correct variant: %d violations", v)
	}
}

// TestCheckerCatchesBrokenVariant proves the checker can fail: the broken
// early-release variant lets the writer in beside the old reader.
func TestCheckerCatchesBrokenVariant(t *testing.T) {
	var cfg shiftlock.Config
	shiftlock.BreakEarlyReaderRelease(&cfg)
	if v := earlyReleaseScenario(t, cfg, true); v == 0 {
		t.Fatal("the broken variant went unnoticed: the checker cannot fail")
	}
}

// TestAbandoningCoversTheBackgroundPass: a writer whose caller gave up
// stays queued (it cannot leave), takes the lock when its turn comes and
// releases it. Abandoning reports it for exactly that span, so that an
// observer can tell such a pass from a real holder.
func TestAbandoningCoversTheBackgroundPass(t *testing.T) {
	cl := newCluster(t, 2, 16, shiftlock.Config{})
	a, b := cl.clients[0], cl.clients[1]
	ctx := ctxT(t)
	g, err := a.AcquireExclusive(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if b.Abandoning(4) {
		t.Fatal("Abandoning before any wait")
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	_, err = b.AcquireExclusive(wctx, 4)
	cancel()
	if err == nil {
		t.Fatal("acquired a held entry")
	}
	if !b.Abandoning(4) || b.Abandoning(5) {
		t.Fatal("the given-up wait is not reported on its entry alone")
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); b.Abandoning(4); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the abandoned wait never passed the lock on")
		}
	}
	if e, err := b.Read(ctx, 4); err != nil || !e.Free() {
		t.Fatalf("entry after the background pass: %v %v", e, err)
	}
}

// awaitSuccessor waits until a writer behind g has announced itself, so
// that g's release is a handover whatever the host's load.
func awaitSuccessor(t *testing.T, g *shiftlock.Guard) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !g.SuccessorKnown(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("no successor announced itself within 30s")
		}
	}
}

// TestHooks: an acquisition calls Hooks.Arrived once its atomic has landed,
// and Hooks.Queued only if it has to wait, under the context Queued
// returns: a deadline set there ends a wait, and one that never waits
// never calls it. (They were context values, WithArrival and
// WithQueueHook; now a context carries cancellation only.)
func TestHooks(t *testing.T) {
	cl := newCluster(t, 2, 16, shiftlock.Config{})
	a, b := cl.clients[0], cl.clients[1]
	ctx := ctxT(t)
	var arrived, queued, stopped int
	h := shiftlock.Hooks{
		Arrived: func() { arrived++ },
		Queued: func(ctx context.Context) (context.Context, func()) {
			queued++
			qctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			return qctx, func() { stopped++; cancel() }
		},
	}
	for _, mode := range []shiftlock.Mode{shiftlock.Exclusive, shiftlock.Shared} {
		arrived, queued, stopped = 0, 0, 0
		g, err := a.AcquireHooked(ctx, 3, mode, h)
		if err != nil || arrived != 1 || queued != 0 {
			t.Fatalf("%v, free entry: err %v, arrived %d, queued %d; want nil, 1, 0", mode, err, arrived, queued)
		}
		// b has to wait behind a writer: its wait ends at Queued's deadline.
		w, err := a.AcquireExclusive(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.AcquireHooked(ctx, 5, mode, h); !errors.Is(err, context.DeadlineExceeded) || arrived != 2 || queued != 1 || stopped != 1 {
			t.Fatalf("%v, held entry: err %v, arrived %d, queued %d, stopped %d; want DeadlineExceeded, 2, 1, 1", mode, err, arrived, queued, stopped)
		}
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
