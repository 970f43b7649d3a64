package shiftlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// Split-phase operations are for a caller that gathers the verbs of many
// lock operations and posts them together: one doorbell, one round trip to
// the memory node for all of them (the proxy's event loop does this,
// lockmap.Doorbell). A Begin call adds the operation's one atomic to the
// caller's batch; once the caller has posted the batch, it completes the
// operation, which needs no further verb when the operation met no
// contention. What may block (a wait in the queue, a release whose closing
// CAS lost to a writer still announcing itself) is handed back for the
// caller to run where blocking is allowed. Each operation is exactly the
// one its blocking counterpart performs: the same atomic, the same
// interpretation (afterEnqueue, afterTry, releaseAfter).

// Start is an exclusive acquisition whose first atomic rides in a caller's
// batch.
type Start struct {
	c   *Client
	g   *Guard
	b   *rdma.Batch
	op  int
	try bool
	e   Entry
	w   *waiter // announced behind e's tail (announce)
}

// BeginExclusive adds the first atomic of an exclusive acquisition of entry
// i, with owner tag tag, to b: the fetch-and-store that enqueues, or with
// try the CAS that takes only a free entry (TryExclusiveTagged). Call End
// once b has been posted.
func (c *Client) BeginExclusive(b *rdma.Batch, i, tag uint64, try bool) (*Start, error) {
	if err := c.checkEntry(i); err != nil {
		return nil, err
	}
	g, err := c.openWriter(i, tag)
	if err != nil {
		return nil, err
	}
	cmp, cmpMask, swap, swapMask := g.enqueueVerb(try)
	op := b.MaskedCAS128(c.layout.EntryAddr(i), cmp, cmpMask, swap, swapMask)
	return &Start{c: c, g: g, b: b, op: op, try: try}, nil
}

// End completes the start after its batch was posted (postErr is what Post
// returned). A free entry is granted at once. A try on a held entry returns
// no guard (Entry tells what it found). An enqueue behind a writer or
// readers returns wait: the caller must go on with Wait, which blocks.
func (s *Start) End(postErr error) (g *Guard, wait bool, err error) {
	c := s.c
	if err = postErr; err == nil {
		err = s.b.Err(s.op)
	}
	if err != nil {
		c.unopen(s.g)
		return nil, false, err
	}
	s.e = Entry(s.b.Old(s.op))
	if s.try {
		if !c.afterTry(s.g, s.e) {
			return nil, false, nil
		}
		return s.g, false, nil
	}
	if c.enqueuedFree(s.g, s.e) {
		return s.g, false, nil
	}
	s.announce()
	return nil, true, nil
}

// announce tells a writer's predecessor at once who its successor is, on
// the caller that must not block, before the wait moves elsewhere.
func (s *Start) announce() {
	if !s.e.Tail().IsZero() {
		s.w = s.c.announce(context.Background(), s.g, s.e)
	}
}

// enqueuedFree completes an enqueue whose atomic found e, if the entry was
// free: then g holds it.
func (c *Client) enqueuedFree(g *Guard, e Entry) bool {
	if !e.Tail().IsZero() || e.Readers() != 0 {
		return false
	}
	g.curRel, g.epoch = e.RelCnt(), e.Epoch()
	c.stats.Immediate.Add(1)
	c.granted(g)
	return true
}

// EnqueueExclusive is the first half of AcquireExclusiveTagged, for a
// caller that must not block, such as an event loop on an in-process
// memory node: it posts the enqueuing atomic and returns the guard if the
// entry was free, or else a Start whose Wait finishes the acquisition
// where blocking is allowed. The atomic is the one AcquireExclusiveTagged
// posts; nothing is asked twice.
func (c *Client) EnqueueExclusive(i, tag uint64) (*Guard, *Start, error) {
	if err := c.checkEntry(i); err != nil {
		return nil, nil, err
	}
	g, err := c.openWriter(i, tag)
	if err != nil {
		return nil, nil, err
	}
	cmp, cmpMask, swap, swapMask := g.enqueueVerb(false)
	old, err := c.ep.MaskedCAS128(context.Background(), c.layout.EntryAddr(i), cmp, cmpMask, swap, swapMask)
	if err != nil {
		c.unopen(g)
		return nil, nil, err
	}
	if e := Entry(old); !c.enqueuedFree(g, e) {
		s := &Start{c: c, g: g, e: e}
		s.announce()
		return nil, s, nil
	}
	return g, nil, nil
}

// Entry is the entry as the start's atomic found it.
func (s *Start) Entry() Entry { return s.e }

// Wait finishes an enqueue that End said must wait, exactly as
// AcquireExclusiveTagged does after its atomic: it blocks until the lock
// is handed over (or a same-owner answer makes the guard pending) or ctx
// ends, in which case the wait completes in the background.
func (s *Start) Wait(ctx context.Context, h Hooks) (*Guard, error) {
	g, err := s.c.awaitTurn(ctx, s.g, s.e, s.w, &h)
	if errors.Is(err, errReset) {
		// The entry was recovered while we waited: start over.
		s.c.stats.Resets.Add(1)
		return s.c.AcquireExclusiveHooked(ctx, s.g.entry, s.g.tag, h)
	}
	return g, err
}

// BeginRelease adds g's release atomic to b, if it needs one, and returns
// the release, to Finish once b has been posted. Like Release, it is a
// no-op on a released guard, and releasing a pending guard needs no verb.
func (g *Guard) BeginRelease(b *rdma.Batch) StagedRelease {
	c := g.c
	if !g.letGoOnce() {
		return StagedRelease{}
	}
	if g.mode == Shared {
		op := b.MaskedFAA128(c.layout.EntryAddr(g.entry), fRdrCnt.Neg(1).Or(fRelCnt.Value(1)), boundary)
		return StagedRelease{g: g, b: b, op: op, shared: true}
	}
	k := c.releasePlan(g)
	if k == relPipelined {
		k = relHandover // in a batch the bump costs no extra round trip
	}
	if k == relModeChange && g.maybeLag {
		// The flip must wait for bumps in flight, which may block.
		return StagedRelease{g: g, b: b, op: -1, k: k, deferred: true}
	}
	op := -1
	if k != relSendOnly {
		v := c.releaseVerb(g, k)
		if v.Verb == rdma.VerbMaskedCAS {
			op = b.MaskedCAS128(v.Addr, v.Compare, v.CompareMask, v.Value, v.Mask)
		} else {
			op = b.MaskedFAA128(v.Addr, v.Value, v.Mask)
		}
	}
	return StagedRelease{g: g, b: b, op: op, k: k}
}

// StagedRelease is a release whose atomic waits in a batch (BeginRelease).
// It is a value, not a closure, because the proxy stages one for every
// release it batches. The zero value finishes as a no-op.
type StagedRelease struct {
	g        *Guard
	b        *rdma.Batch
	op       int // the atomic's index in b, or -1 for none
	k        relKind
	shared   bool
	deferred bool // the whole release must run where it may block
}

// Finish completes the release once its batch was posted (postErr: the
// post's error). It returns the release's error, and rest, non-nil when
// the release must go on where it may block (releaseSlow: a closing CAS
// lost to a writer that has not announced itself yet).
func (r StagedRelease) Finish(postErr error) (rest func() error, err error) {
	g := r.g
	if g == nil {
		return nil, nil
	}
	c := g.c
	switch {
	case r.shared:
		defer c.holds.add(g.entry, -1, 0)
		if postErr != nil {
			return nil, postErr
		}
		return nil, r.b.Err(r.op)
	case r.deferred:
		return func() error {
			defer c.released(g)
			return c.finishRelease(g, r.k)
		}, nil
	}
	var old Entry
	if r.op >= 0 {
		err := postErr
		if err == nil {
			err = r.b.Err(r.op)
		}
		if err != nil {
			c.released(g)
			return nil, fmt.Errorf("release of entry %d: %w", g.entry, err)
		}
		old = Entry(r.b.Old(r.op))
	}
	slow, err := c.releaseAfter(g, r.k, old)
	if !slow {
		c.released(g)
		return nil, err
	}
	return func() error {
		defer c.released(g)
		return c.releaseSlow(g)
	}, nil
}
