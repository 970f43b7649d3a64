package shiftlock_test

import (
	"context"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
	"github.com/shiftlock/shiftlock-proxy/shiftlock/locktest"
)

// bell is a shiftlock.Locker that posts the atomics of concurrent exclusive
// acquisitions and releases together, one batch per round, through the
// split-phase API: what an event loop ringing one doorbell per iteration
// does. Shared acquisitions use the blocking API.
type bell struct {
	c    *shiftlock.Client
	reqs chan func(*rdma.Batch) func(error)
}

func newBell(c *shiftlock.Client) *bell {
	b := &bell{c: c, reqs: make(chan func(*rdma.Batch) func(error), 256)}
	go b.run()
	return b
}

func (b *bell) run() {
	var batch rdma.Batch
	var ends []func(error)
	for req := range b.reqs {
		batch.Reset()
		ends = append(ends[:0], req(&batch))
	more:
		for len(ends) < 64 {
			select {
			case req, ok := <-b.reqs:
				if !ok {
					break more
				}
				ends = append(ends, req(&batch))
			default:
				break more
			}
		}
		err := b.c.Endpoint().Post(context.Background(), &batch)
		for _, end := range ends {
			end(err)
		}
	}
}

// ring submits one operation and waits until its batch was posted.
func (b *bell) ring(begin func(*rdma.Batch) func(error)) {
	done := make(chan struct{})
	b.reqs <- func(batch *rdma.Batch) func(error) {
		end := begin(batch)
		return func(err error) { end(err); close(done) }
	}
	<-done
}

func (b *bell) Entries() uint64 { return b.c.Entries() }

func (b *bell) Acquire(ctx context.Context, i uint64, m shiftlock.Mode) (shiftlock.Grant, error) {
	return b.AcquireHooked(ctx, i, m, shiftlock.Hooks{})
}

// AcquireHooked makes bell a HookedLocker, so that the checker measures
// waits from the arrival of the enqueuing atomic, as it does for a Client.
func (b *bell) AcquireHooked(ctx context.Context, i uint64, m shiftlock.Mode, h shiftlock.Hooks) (shiftlock.Grant, error) {
	if m == shiftlock.Shared {
		return b.c.AcquireSharedHooked(ctx, i, h)
	}
	var s *shiftlock.Start
	var g *shiftlock.Guard
	var wait bool
	var err error
	b.ring(func(batch *rdma.Batch) func(error) {
		s, err = b.c.BeginExclusive(batch, i, 0, false)
		if err != nil {
			return func(error) {}
		}
		return func(perr error) { g, wait, err = s.End(perr) }
	})
	if err != nil {
		return nil, err
	}
	if h.Arrived != nil {
		h.Arrived()
	}
	if wait {
		g, err = s.Wait(ctx, h)
		if err != nil {
			return nil, err
		}
	}
	return bellGrant{b, g}, nil
}

type bellGrant struct {
	b *bell
	g *shiftlock.Guard
}

func (bg bellGrant) Token() uint64 { return bg.g.Token() }

func (bg bellGrant) Release(context.Context) error {
	var rest func() error
	var err error
	bg.b.ring(func(batch *rdma.Batch) func(error) {
		r := bg.g.BeginRelease(batch)
		return func(perr error) { rest, err = r.Finish(perr) }
	})
	if rest != nil {
		return rest()
	}
	return err
}

// TestSplitPhaseMutualExclusion runs the checker with every exclusive
// acquisition and release going through batches that mix many operations
// on few entries (so a batch often holds a release and the next acquire of
// the same entry), next to blocking shared acquisitions.
func TestSplitPhaseMutualExclusion(t *testing.T) {
	const threshold = 4
	cl := newCluster(t, 3, 8, shiftlock.Config{Threshold: threshold})
	var ls []shiftlock.Locker
	for _, c := range cl.clients {
		b := newBell(c)
		t.Cleanup(func() { close(b.reqs) })
		ls = append(ls, b)
	}
	res := checkFewEntries(t, cl, locktest.Workload{Clients: ls, Workers: 120, Entries: 4, ReadRatio: 0.3, Ops: 120, Seed: 7}, threshold+1)
	t.Logf("%d ops", res.Ops)
}

// checkFewEntries runs w under the checker, readers starving through at
// most bound exclusive grants, and fails on a violation or on an entry of
// cl left held.
func checkFewEntries(t *testing.T, cl *cluster, w locktest.Workload, bound uint64) locktest.Result {
	t.Helper()
	chk := locktest.NewChecker(w.Entries)
	chk.StarveBound = bound
	res, err := locktest.Run(ctxT(t), w, chk)
	if err != nil {
		t.Fatal(err)
	}
	if chk.Violations() != 0 {
		t.Fatalf("%d violations, first: %v", chk.Violations(), chk.Report())
	}
	for i := uint64(0); i < uint64(w.Entries); i++ {
		if e, _ := cl.clients[0].Read(ctxT(t), i); !e.Free() {
			t.Fatalf("entry %d left %v", i, e)
		}
	}
	return res
}

// TestSplitPhaseCosts: one batch carries several uncontended acquisitions,
// one atomic each, and their releases another batch: two round trips in all.
func TestSplitPhaseCosts(t *testing.T) {
	cl := newCluster(t, 1, 16, shiftlock.Config{})
	c := cl.clients[0]
	ctx := ctxT(t)
	before := c.Endpoint().Counters().Snapshot()
	var b rdma.Batch
	var starts []*shiftlock.Start
	for i := uint64(0); i < 8; i++ {
		s, err := c.BeginExclusive(&b, i, 0, i%2 == 0)
		if err != nil {
			t.Fatal(err)
		}
		starts = append(starts, s)
	}
	err := c.Endpoint().Post(ctx, &b)
	var gs []*shiftlock.Guard
	for _, s := range starts {
		g, wait, err := s.End(err)
		if g == nil || wait || err != nil {
			t.Fatalf("uncontended start: %v %v %v", g, wait, err)
		}
		gs = append(gs, g)
	}
	if _, ok, _ := c.TryExclusive(ctx, 3); ok {
		t.Fatal("a granted entry was free")
	}
	b.Reset()
	var rels []shiftlock.StagedRelease
	for _, g := range gs {
		rels = append(rels, g.BeginRelease(&b))
	}
	err = c.Endpoint().Post(ctx, &b)
	for _, r := range rels {
		if rest, err := r.Finish(err); rest != nil || err != nil {
			t.Fatalf("uncontended release: %v %v", rest != nil, err)
		}
	}
	// Released guards stage nothing again, and their release finishes as
	// a no-op.
	b.Reset()
	for _, g := range gs {
		if rest, err := g.BeginRelease(&b).Finish(nil); rest != nil || err != nil || len(b.Ops) != 0 {
			t.Fatalf("second release: %v %v, %d ops staged", rest != nil, err, len(b.Ops))
		}
	}
	d := c.Endpoint().Counters().Snapshot().Sub(before)
	// The failed try in the middle is one more atomic and round trip.
	if d.OutAtomics() != 17 || d.Out[rdma.VerbBatch] != 3 {
		t.Fatalf("cost %v, want 17 atomics in 3 round trips", d.Out)
	}
	for i := uint64(0); i < 8; i++ {
		if e, _ := c.Read(ctx, i); !e.Free() {
			t.Fatalf("entry %d left %v", i, e)
		}
	}
}
