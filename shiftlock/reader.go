package shiftlock

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// AcquireShared takes entry i as a reader (Algorithm 2, READER-ACQUIRE): one
// field-wise FAA on RdrCnt. If a writer is queued, the reader waits for the
// epoch to flip, polling with READs.
//
// A reader that gives up while waiting must not release before its epoch
// comes: its RelCnt increment could complete the count a queued writer is
// waiting for while an older reader still holds the lock. So, as for writers,
// the wait completes in the background and is released at once.
func (c *Client) AcquireShared(ctx context.Context, i uint64) (*Guard, error) {
	return c.AcquireSharedHooked(ctx, i, Hooks{})
}

// AcquireSharedHooked is AcquireShared telling h how it progresses.
func (c *Client) AcquireSharedHooked(ctx context.Context, i uint64, h Hooks) (*Guard, error) {
	if err := c.checkEntry(i); err != nil {
		return nil, err
	}
	for {
		g, err := c.acquireShared(ctx, i, &h)
		if errors.Is(err, errReset) {
			c.stats.Resets.Add(1)
			continue
		}
		return g, err
	}
}

func (c *Client) acquireShared(ctx context.Context, i uint64, h *Hooks) (*Guard, error) {
	g := &Guard{c: c, entry: i, mode: Shared}
	c.holds.add(i, 1, 0)
	t0 := c.traceStart()
	old, err := c.ep.MaskedFAA128(context.Background(), c.layout.EntryAddr(i), fRdrCnt.Value(1), boundary)
	if err != nil {
		c.holds.add(i, -1, 0)
		return nil, err
	}
	c.traced(PhaseReaderIA, t0)
	h.arrived()
	e := Entry(old)
	full := e.Readers() >= MaxReaders
	if e.Tail().IsZero() {
		if full {
			// Counted, so leave as a reader that came and went: a writer
			// arriving now may wait for this release in RelCnt.
			if err := c.releaseShared(context.Background(), g); err != nil {
				return nil, err
			}
			return nil, ErrTooManyReaders
		}
		g.token = e.RelCnt()
		c.stats.Immediate.Add(1)
		c.stats.SharedGrants.Add(1)
		return g, nil
	}
	mark := c.holds.wait(i)
	g.waited = true
	c.stats.Waits.Add(1)
	rw := c.waitEpoch(i, e.Epoch(), e.RelCnt(), e.Tail().Node)
	if full {
		// A waiting reader cannot leave before its epoch (see above).
		c.abandonShared(g, rw, e, mark)
		return nil, ErrTooManyReaders
	}
	qctx, stop := h.queued(ctx)
	defer stop()
	var res readResult
	t0 = c.traceStart()
	select {
	case res = <-rw.res:
		c.traced(PhaseReaderWW, t0)
	case <-qctx.Done():
		if c.cfg.testEarlyReaderRelease {
			// The broken variant: leave now. Our RdrCnt increment is undone
			// and RelCnt counts a release, before our epoch came.
			c.stats.Abandoned.Add(1)
			go func() { <-rw.res }()
			c.holds.add(i, 1, -1) // as broken as the rest of this variant
			g.done = true
			_ = c.releaseShared(ctx, g)
			return nil, qctx.Err()
		}
		// We cannot leave before our epoch: finish in the background and
		// release at once.
		c.abandonShared(g, rw, e, mark)
		return nil, qctx.Err()
	}
	if res.err == nil {
		// Our epoch came; the grant must still survive any probe since we
		// began to wait. Not cut short by ctx: the lock is ours already.
		res.err = c.enter(context.Background(), i, e.RelCnt(), mark)
	}
	if res.err != nil {
		c.holds.add(i, 0, -1)
		return nil, res.err // errReset: the reset zeroed our RdrCnt increment
	}
	g.token = res.e.RelCnt()
	c.stats.SharedGrants.Add(1)
	return g, nil
}

// abandonShared lets g, a reader counted in entry e (read by its FAA) and
// waiting for its epoch (rw), go: the wait completes in the background and
// the grant is released at once.
func (c *Client) abandonShared(g *Guard, rw *readWaiter, e Entry, mark uint32) {
	i := g.entry
	c.stats.Abandoned.Add(1)
	c.holds.abandon(i, 1)
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		defer c.holds.abandon(i, -1)
		res := <-rw.res
		if res.err == nil {
			res.err = c.enter(context.Background(), i, e.RelCnt(), mark)
		}
		if res.err != nil {
			c.holds.add(i, 0, -1)
			return
		}
		g.done = true
		if err := c.releaseShared(context.Background(), g); err != nil {
			c.log.Warn("releasing abandoned shared lock", zap.Uint64("entry", i), zap.Error(err))
		}
	}()
}

// TryShared takes entry i as a reader only if no writer is queued or
// holding. It never waits: a masked CAS that compares TailPtr with zero and
// RdrCnt with the count it expects, retried a few times if only the reader
// count moved.
func (c *Client) TryShared(ctx context.Context, i uint64) (*Guard, bool, error) {
	if err := c.checkEntry(i); err != nil {
		return nil, false, err
	}
	addr := c.layout.EntryAddr(i)
	c.holds.add(i, 1, 0)
	var readers uint64
	for attempt := 0; attempt < 4; attempt++ {
		cmp := fRdrCnt.Value(readers)
		old, err := c.ep.MaskedCAS128(context.Background(), addr, cmp, rdma.MaskOf(fTail, fRdrCnt),
			fRdrCnt.Value(readers+1), fRdrCnt.Mask())
		if err != nil {
			c.holds.add(i, -1, 0)
			return nil, false, err
		}
		e := Entry(old)
		if !e.Tail().IsZero() {
			break
		}
		if e.Readers() == readers {
			c.stats.Immediate.Add(1)
			c.stats.SharedGrants.Add(1)
			return &Guard{c: c, entry: i, mode: Shared, token: e.RelCnt()}, true, nil
		}
		readers = e.Readers()
		if readers >= MaxReaders {
			// The next CAS would count one more than MaxReaders.
			c.holds.add(i, -1, 0)
			return nil, false, ErrTooManyReaders
		}
	}
	c.holds.add(i, -1, 0)
	c.stats.TryFailures.Add(1)
	return nil, false, nil
}

// releaseShared is Algorithm 3's READER-RELEASE: one FAA that decrements
// RdrCnt and counts the release in RelCnt.
func (c *Client) releaseShared(ctx context.Context, g *Guard) error {
	defer c.holds.add(g.entry, -1, 0)
	t0 := c.traceStart()
	_, err := c.ep.MaskedFAA128(context.Background(), c.layout.EntryAddr(g.entry), fRdrCnt.Neg(1).Or(fRelCnt.Value(1)), boundary)
	c.traced(PhaseReleaseIA, t0)
	return err
}
