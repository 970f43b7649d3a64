package shiftlock

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	t0  time.Time
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
		s.t0 = s.c.traceStart()
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

// Notify has f called, on the goroutine that delivers it, whenever a
// message that may end the wait reaches the start's slot (not a Successor,
// which only tells the holder-to-be who follows it). It is for a caller
// that waits without blocking (TryWait): f schedules the next TryWait and
// must not block. Messages that came before Notify are not told of: call
// TryWait after it. Notify(nil) stops it. It reports false if the start
// does not wait for a message (TryWait is then of no use: call Wait).
func (s *Start) Notify(f func()) bool {
	if s.w == nil {
		return false
	}
	if f == nil {
		return s.c.inbox.Notify(s.g.self.Target, nil)
	}
	return s.c.inbox.Notify(s.g.self.Target, func(rm rdma.Message) {
		if len(rm.Payload) == 0 || rm.Payload[0] != msgSuccessor {
			f()
		}
	})
}

// TryWait is Wait for a caller that must not block, such as the event loop
// of a waiter's client: it takes the messages that have reached the
// start's slot and reports granted once the predecessor's Handover is
// among them and the grant needs nothing that blocks. Otherwise it leaves
// the wait as it found it, and mustWait says that Wait has to finish it
// (a mode change, an owner answer, a recovery probe since the wait began;
// Wait takes the message TryWait took). With neither, nothing decisive has
// come yet: call it again when Notify says so, or call Wait. A Start that
// TryWait granted is done; one it did not may still go on with Wait.
//
// The grant is the blocking path's, step for step (awaitTurn, waitHandover,
// takeHandover, enter), minus the wait budget and the failure checks,
// which are the caller's to schedule: they are Wait's.
func (s *Start) TryWait() (g *Guard, granted, mustWait bool) {
	c, w := s.c, s.w
	g = s.g
	if w == nil || w.stash != nil {
		return nil, false, true
	}
	for {
		var rm rdma.Message
		select {
		case rm = <-g.ch:
		default:
			return nil, false, false
		}
		m, ok := g.accept(rm)
		if !ok || m.Kind == msgSuccessor {
			continue
		}
		if m.Kind != msgHandover {
			w.stash = &m
			return nil, false, true
		}
		if ok, _, _ := c.holds.promote(g.entry, w.mark); !ok {
			// A recovery probe came since the wait began: enter re-reads
			// the entry, which blocks. Wait takes the handover again.
			w.stash = &m
			return nil, false, true
		}
		// What enter checks held, and a Handover's takeHandover never
		// blocks or fails.
		_ = c.takeHandover(context.Background(), g, w, m)
		g.waited = true
		c.stats.Waits.Add(1)
		c.traced(PhaseWriterWP, s.t0)
		w.stop()
		c.inbox.Notify(g.self.Target, nil)
		c.granted(g)
		return g, true, false
	}
}

// WakeAt is when a wait that TryWait serves must go on with Wait at the
// latest, if nothing came: the waiter's next failure check.
func (s *Start) WakeAt() time.Time {
	if s.w == nil {
		return time.Now()
	}
	return s.w.nextCheck
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
