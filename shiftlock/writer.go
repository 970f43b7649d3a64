package shiftlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// AcquireExclusive takes entry i as a writer (Algorithm 2, WRITER-ACQUIRE).
// With no contention it costs one masked CAS. A writer that finds a
// predecessor sends it a Successor notification and waits for the lock to be
// handed over; one that finds readers waits for them to leave.
//
// If ctx ends while queued, the writer cannot leave the queue without
// breaking it: the acquisition completes in the background and is released at
// once, and the caller gets ctx's error.
func (c *Client) AcquireExclusive(ctx context.Context, i uint64) (*Guard, error) {
	return c.AcquireExclusiveTagged(ctx, i, 0)
}

// AcquireExclusiveTagged is AcquireExclusive with an owner tag (owner.go;
// Config.OwnerTags). The tag travels in the Successor notification, at no
// extra cost. If a writer ahead in the queue carries the same tag and has
// been vouched for (Guard.Vouch), the call returns at once with a pending
// guard (Guard.Pending): the lock is held by the same owner, and this
// writer's place in the queue completes in the background. Tag 0 is an
// untagged writer.
func (c *Client) AcquireExclusiveTagged(ctx context.Context, i, tag uint64) (*Guard, error) {
	return c.AcquireExclusiveHooked(ctx, i, tag, Hooks{})
}

// AcquireExclusiveHooked is AcquireExclusiveTagged telling h how it
// progresses.
func (c *Client) AcquireExclusiveHooked(ctx context.Context, i, tag uint64, h Hooks) (*Guard, error) {
	if err := c.checkEntry(i); err != nil {
		return nil, err
	}
	for {
		g, err := c.acquireExclusive(ctx, i, tag, &h)
		if errors.Is(err, errReset) {
			c.stats.Resets.Add(1)
			continue
		}
		return g, err
	}
}

func (c *Client) openSlot(i, tag uint64) (*Guard, error) {
	t, ch, err := c.inbox.Open()
	if err != nil {
		return nil, err
	}
	g := &Guard{c: c, entry: i, mode: Exclusive, self: Tail{Node: c.ep.Node(), Target: t}, ch: ch, tag: tag}
	c.track(g, tag)
	return g, nil
}

func (c *Client) closeSlot(g *Guard) {
	if g.own != nil {
		for _, q := range c.owners.remove(g.self.Target) {
			c.answerNo(g.entry, q)
		}
	}
	c.inbox.Close(g.self.Target)
}

func (c *Client) acquireExclusive(ctx context.Context, i, tag uint64, h *Hooks) (*Guard, error) {
	g, err := c.openWriter(i, tag)
	if err != nil {
		return nil, err
	}
	// Fetch-and-store of TailPtr: a masked CAS with an empty compare mask.
	// The verb must not be abandoned half-way by the caller's deadline.
	cmp, cmpMask, swap, swapMask := g.enqueueVerb(false)
	t0 := c.traceStart()
	old, err := c.ep.MaskedCAS128(context.Background(), c.layout.EntryAddr(i), cmp, cmpMask, swap, swapMask)
	if err != nil {
		c.unopen(g)
		return nil, err
	}
	c.traced(PhaseWriterIA, t0)
	h.arrived()
	return c.afterEnqueue(ctx, g, Entry(old), h)
}

// openWriter opens a writer's slot for entry i, counted as holding (for
// recovery probes) from before its atomic is posted, since it may hold as
// soon as that lands.
func (c *Client) openWriter(i, tag uint64) (*Guard, error) {
	g, err := c.openSlot(i, tag)
	if err != nil {
		return nil, err
	}
	c.holds.add(i, 1, 0)
	return g, nil
}

// unopen undoes openWriter for a writer whose atomic failed or found the
// entry held (a try).
func (c *Client) unopen(g *Guard) {
	c.holds.add(g.entry, -1, 0)
	c.closeSlot(g)
}

// enqueueVerb is the masked CAS of a writer's first atomic: a
// fetch-and-store of TailPtr (Algorithm 2 line 7), or for a try a CAS that
// also needs TailPtr and RdrCnt to be zero.
func (g *Guard) enqueueVerb(try bool) (cmp, cmpMask, swap, swapMask rdma.U128) {
	if try {
		cmpMask = rdma.MaskOf(fTail, fRdrCnt)
	}
	return rdma.U128{}, cmpMask, g.self.value(), fTail.Mask()
}

// afterEnqueue is Algorithm 2 from line 11, once the enqueuing atomic has
// returned the entry's old value e: granted at once, or wait for the
// predecessor's handover, or for the readers ahead to leave.
func (c *Client) afterEnqueue(ctx context.Context, g *Guard, e Entry, h *Hooks) (*Guard, error) {
	return c.awaitTurn(ctx, g, e, nil, h)
}

// announce is the part of afterEnqueue that never blocks, for a writer
// queued behind another (e.Tail): it registers the wait and tells the
// predecessor who its successor is. A caller that must not block (an event
// loop) announces at once and leaves the wait to a goroutine: the
// predecessor may be releasing right now, and a release that does not know
// its successor yet has to wait for the Successor message.
func (c *Client) announce(ctx context.Context, g *Guard, e Entry) *waiter {
	i, tag, pred := g.entry, g.tag, e.Tail()
	g.curRel, g.epoch = e.RelCnt(), e.Epoch()
	mark := c.holds.wait(i)
	g.queuedBehind(pred)
	w := c.newWaiter(i, e.RelCnt(), pred.Node)
	w.mark = mark
	// The Successor notification carries our owner tag, which is all
	// owner recognition needs (owner.go).
	t0 := c.traceStart()
	c.send(ctx, pred, message{Kind: msgSuccessor, U32: uint32(g.self.Target), Entry: i, Value: tag}, func(err error) {
		// The predecessor is gone: only recovery can unblock us.
		c.log.Warn("successor notification failed", zap.Uint64("entry", i), zap.Stringer("pred", pred), zap.Error(err))
		w.blockerDown.Store(true)
	})
	c.traced(PhaseWriterNP, t0)
	return w
}

// awaitTurn is the rest of afterEnqueue: w is announce's waiter when the
// entry had a tail (announced here if the caller has not).
func (c *Client) awaitTurn(ctx context.Context, g *Guard, e Entry, w *waiter, h *Hooks) (*Guard, error) {
	i := g.entry
	if w == nil && !e.Tail().IsZero() {
		w = c.announce(ctx, g, e)
	}
	g.curRel, g.epoch = e.RelCnt(), e.Epoch()
	switch {
	case w != nil:
		g.waited = true
		c.stats.Waits.Add(1)
		qctx, stop := h.queued(ctx)
		t0 := c.traceStart()
		err := c.waitHandover(qctx, g, w)
		if err == nil {
			c.traced(PhaseWriterWP, t0)
		}
		stop()
		if err != nil {
			if errors.Is(err, errSameOwner) {
				return g, nil // pending: the wait goes on in the background
			}
			return nil, err
		}
	case e.Readers() != 0:
		// Readers before us: we own the lock once each has released, i.e.
		// once RelCnt has advanced by their number.
		mark := c.holds.wait(i)
		target := e.RelCnt() + e.Readers()
		w := c.newWaiter(i, e.RelCnt(), 0)
		w.mark = mark
		finish := func(ctx context.Context) error {
			overshot := false
			if _, err := w.poll(ctx, func(e Entry) bool {
				if d := int64(e.RelCnt() - target); d > 0 && !leaped(e.RelCnt(), target) && !overshot {
					// Only a reader released twice, or one not counted, gets
					// RelCnt past our target: an invariant is broken.
					overshot = true
					c.log.Error("RelCnt passed a writer's target", zap.Uint64("entry", i), zap.Uint64("target", target), zap.Stringer("entry_state", e))
				}
				return e.RelCnt() == target
			}); err != nil {
				return err
			}
			g.curRel = target
			return c.enter(ctx, i, w.base, w.mark)
		}
		g.waited = true
		c.stats.Waits.Add(1)
		qctx, stop := h.queued(ctx)
		t0 := c.traceStart()
		err := finish(qctx)
		if err == nil {
			c.traced(PhaseWriterWR, t0)
		}
		stop()
		w.stop()
		if err != nil {
			return nil, c.abandonExclusive(qctx, g, w, err, finish)
		}
	default:
		c.stats.Immediate.Add(1)
	}
	c.granted(g)
	return g, nil
}

// granted makes g the holder: it answers owner questions as the head of
// the queue, and its token is RelCnt as of the grant.
func (c *Client) granted(g *Guard) {
	g.headOfQueue()
	g.token = g.curRel
	c.stats.ExclusiveGrants.Add(1)
}

// errSameOwner ends a queued writer's foreground wait when a vouched writer
// ahead of it has its owner tag: the caller gets a pending guard.
var errSameOwner = errors.New("shiftlock: the lock is held by the same owner")

// waitHandover waits for the predecessor's Handover or ModeChanged and, for
// a mode change, for the readers it let in to leave. A same-owner answer
// (owner.go) ends the foreground wait early with errSameOwner, and the rest
// of the wait goes on in the background (pend).
//
// The wait is resumable: if the caller gives up half-way, the background
// completion carries on from where it stopped rather than waiting again for
// a message it already consumed.
//
// A tagged writer whose deadline passes before any answer about its owner
// came does not give up yet: it asks the queue ahead of it, and wants the
// no too (settle). Its deadline is a budget for waiting on another owner's
// lock, not a race against the messages that tell it its own owner holds
// the lock: those arrive one proxy after another, and under load they take
// as long as the proxies take to be scheduled, which no budget bounds.
func (c *Client) waitHandover(ctx context.Context, g *Guard, w *waiter) error {
	var got bool
	var m message
	asked := false // settle's question is out: its no ends the wait
	finish := func(ctx context.Context) error {
		for !got {
			var err error
			if m, err = w.await(ctx, g); err != nil {
				return err
			}
			switch m.Kind {
			case msgSameOwner:
				if g.tag != 0 && !g.same {
					// Only the first answer counts; later ones (another
					// relay of the same question) are dropped.
					g.same = true
					g.mu.Lock()
					g.token = m.Value
					g.mu.Unlock()
					return errSameOwner
				}
				continue
			case msgNotOwner:
				if asked && !g.same {
					return errNotOwner
				}
				continue // an answer to a question settled otherwise
			}
			got = true
		}
		if err := c.takeHandover(ctx, g, w, m); err != nil {
			return err
		}
		return c.enter(ctx, g.entry, w.base, w.mark)
	}
	err := finish(ctx)
	if errors.Is(err, context.DeadlineExceeded) && g.tag != 0 && !g.same {
		asked = true
		err = c.settle(ctx, g, finish)
		asked = false
	}
	if errors.Is(err, errSameOwner) {
		c.pend(g, w, finish)
		return err
	}
	w.stop()
	if err != nil {
		return c.abandonExclusive(ctx, g, w, err, finish)
	}
	return nil
}

// errNotOwner ends settle's wait: nobody ahead answers for the owner.
var errNotOwner = errors.New("shiftlock: no writer ahead has the same owner")

// OwnerAnswerCap is the default bound of a wait for a definite answer about
// an owner tag (Config.OwnerAnswerWait; QueryOwner's callers use it too).
// Every question is answered, yes or no, as soon as the writers it reaches
// know (owner.go); only a proxy that dies while it holds a question leaves
// it unanswered, and this is how long the asker then waits before it takes
// the silence as a no.
const OwnerAnswerCap = time.Second

// settle is a tagged writer's last question when its deadline (ctx) has
// passed while it waits in the queue: does a writer ahead of it carry its
// owner tag? It waits for the answer, yes or no, within OwnerAnswerWait,
// while the handover may still arrive. It returns errSameOwner for a yes,
// nil if the lock was handed over meanwhile, and ctx's error for a no.
//
// A yes can only come from a writer ahead that is vouched, or becomes so:
// such a writer is itself granted, or settles in the same way, so the
// answers resolve from the head of the queue backwards.
func (c *Client) settle(ctx context.Context, g *Guard, finish func(context.Context) error) error {
	o := g.own
	if o == nil {
		return ctx.Err()
	}
	o.mu.Lock()
	pred := o.pred
	o.mu.Unlock()
	if pred.IsZero() {
		return ctx.Err() // granted meanwhile, or no writer ahead: nothing to ask
	}
	q := query{tag: g.tag, origin: g.self, wantNo: true}
	if pred.Node == c.ep.Node() {
		c.ownerQuery(pred.Target, g.entry, q)
	} else {
		c.send(context.Background(), pred, q.message(g.entry), func(error) { c.answerNo(g.entry, q) })
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.OwnerAnswerWait)
	defer cancel()
	switch err := finish(actx); {
	case err == nil, errors.Is(err, errSameOwner):
		return err
	case errors.Is(err, errNotOwner):
		return ctx.Err()
	case actx.Err() != nil:
		c.log.Warn("owner question unanswered", zap.Uint64("entry", g.entry), zap.Stringer("pred", pred), zap.Duration("waited", c.cfg.OwnerAnswerWait))
		return ctx.Err()
	default:
		return err
	}
}

// pend completes a pending guard's wait in the background. Once the lock
// arrives, the guard holds it (or, if it was released meanwhile, passes it
// on at once). If the wait fails instead (the entry was recovered, the
// fabric failed), the place in the queue is gone and the guard stays
// pending for good: its owner's hold elsewhere is not this guard's to end.
func (c *Client) pend(g *Guard, w *waiter, finish func(context.Context) error) {
	g.mu.Lock()
	g.pending = true
	g.onWay.Store(true)
	g.mu.Unlock()
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		err := finish(context.Background())
		w.stop()
		g.mu.Lock()
		early := g.early
		if err != nil {
			g.lost, g.early = true, false
			g.onWay.Store(false)
			g.mu.Unlock()
			c.holds.add(g.entry, 0, -1)
			c.closeSlot(g)
			if early {
				c.holds.abandon(g.entry, -1)
			}
			return
		}
		g.pending = false
		g.onWay.Store(false)
		g.token = g.curRel
		g.mu.Unlock()
		g.headOfQueue()
		c.stats.ExclusiveGrants.Add(1)
		if early {
			if err := c.releaseExclusive(context.Background(), g); err != nil {
				c.log.Warn("releasing a pending lock released early", zap.Uint64("entry", g.entry), zap.Error(err))
			}
			c.holds.abandon(g.entry, -1)
		}
	}()
}

func (c *Client) takeHandover(ctx context.Context, g *Guard, w *waiter, m message) error {
	switch m.Kind {
	case msgHandover:
		// The sender released before this arrived, so a recovery probe
		// may have found neither of us holding: enter, after this, checks
		// for a probe since the wait began.
		g.curRel, g.consWrt, g.epoch = m.Value, m.U32, uint64(m.Flags>>1&1)
		g.maybeLag = m.Flags&flagBumpsInFlight != 0
		g.granted = msgHandover
		// No wait for readers: traced as a zero, as the authors' artifact
		// times it, so that a mean over the phase's occurrences compares
		// with their Table 3.
		c.traced(PhaseWriterWR, time.Now())
		return nil
	case msgModeChanged:
		g.granted = msgModeChanged
		// The predecessor flipped the epoch for the readers that were
		// waiting; we own the lock once they, and it, have released.
		g.curRel, g.consWrt, g.epoch = m.Value, 0, uint64(m.Flags>>1&1)
		if m.Flags&flagNoReaders != 0 {
			return nil
		}
		t0 := c.traceStart()
		_, err := w.poll(ctx, func(e Entry) bool { return e.RelCnt() == m.Value })
		if err == nil {
			c.traced(PhaseWriterWR, t0)
		}
		return err
	}
	return fmt.Errorf("shiftlock: unexpected message kind %d", m.Kind)
}

// abandonExclusive handles a wait that ended with err. A reset restarts the
// acquisition; a caller's deadline hands the rest of the wait to a
// background goroutine that releases the lock as soon as it has it.
func (c *Client) abandonExclusive(ctx context.Context, g *Guard, w *waiter, err error, finish func(context.Context) error) error {
	if errors.Is(err, errReset) {
		c.holds.add(g.entry, 0, -1)
		c.closeSlot(g)
		return errReset
	}
	if ctx.Err() == nil || c.closed.Load() {
		// A fabric failure: we cannot know the queue's fate; the node is
		// cut off and recovery will clean up after it.
		c.holds.add(g.entry, 0, -1)
		c.closeSlot(g)
		return err
	}
	c.stats.Abandoned.Add(1)
	c.holds.abandon(g.entry, 1)
	g.same = true // nobody was told, so a same-owner answer now means nothing
	g.letGo()
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		defer c.holds.abandon(g.entry, -1)
		defer w.stop()
		bctx := context.Background()
		if err := finish(bctx); err != nil {
			c.holds.add(g.entry, 0, -1)
			c.closeSlot(g)
			return
		}
		g.token = g.curRel
		if err := g.Release(bctx); err != nil {
			c.log.Warn("releasing abandoned lock", zap.Uint64("entry", g.entry), zap.Error(err))
		}
	}()
	return ctx.Err()
}

// TryExclusive takes entry i as a writer only if it is free: one masked CAS
// comparing TailPtr and RdrCnt with zero. It never waits.
func (c *Client) TryExclusive(ctx context.Context, i uint64) (*Guard, bool, error) {
	g, ok, _, err := c.TryExclusiveTagged(ctx, i, 0)
	return g, ok, err
}

// TryExclusiveTagged is TryExclusive with an owner tag (owner.go): a guard
// it grants answers questions about the tag once vouched. A failed try
// returns the entry it found, whose tail a caller may ask about its owner
// (QueryOwner) and whose RelCnt is an exclusive holder's token.
func (c *Client) TryExclusiveTagged(ctx context.Context, i, tag uint64) (g *Guard, ok bool, e Entry, err error) {
	if err := c.checkEntry(i); err != nil {
		return nil, false, Entry{}, err
	}
	g, err = c.openWriter(i, tag)
	if err != nil {
		return nil, false, Entry{}, err
	}
	cmp, cmpMask, swap, swapMask := g.enqueueVerb(true)
	old, err := c.ep.MaskedCAS128(context.Background(), c.layout.EntryAddr(i), cmp, cmpMask, swap, swapMask)
	if err != nil {
		c.unopen(g)
		return nil, false, Entry(old), err
	}
	e = Entry(old)
	if !c.afterTry(g, e) {
		return nil, false, e, nil
	}
	return g, true, e, nil
}

// afterTry completes a try whose CAS found e: granted if it was free.
func (c *Client) afterTry(g *Guard, e Entry) bool {
	if !e.Free() {
		c.unopen(g)
		c.stats.TryFailures.Add(1)
		return false
	}
	g.curRel, g.epoch = e.RelCnt(), e.Epoch()
	c.stats.Immediate.Add(1)
	c.granted(g)
	return true
}

// releaseExclusive is Algorithm 3's WRITER-RELEASE.
func (c *Client) releaseExclusive(_ context.Context, g *Guard) error {
	k := c.releasePlan(g)
	if k == relPipelined {
		return c.releasePipelined(g)
	}
	defer c.released(g)
	return c.finishRelease(g, k)
}

// finishRelease performs plan k's atomic and what follows it, blocking
// where it must.
func (c *Client) finishRelease(g *Guard, k relKind) error {
	slow, err := c.releaseStep(g, k)
	if slow {
		return c.releaseSlow(g)
	}
	return err
}

// releaseStep performs plan k's atomic, after the bumps in flight when k
// flips the epoch, and completes what follows it. slow means the release
// must go on in releaseSlow.
func (c *Client) releaseStep(g *Guard, k relKind) (slow bool, err error) {
	if k == relModeChange && g.maybeLag {
		// The readers let in by the flip take RelCnt as their token, so
		// every bump of the run of writers must have landed first.
		if err := c.awaitBumps(g); err != nil {
			return false, err
		}
	}
	var old rdma.U128
	if k != relSendOnly {
		op := c.releaseVerb(g, k)
		t0 := c.traceStart()
		if op.Verb == rdma.VerbMaskedCAS {
			old, err = c.ep.MaskedCAS128(context.Background(), op.Addr, op.Compare, op.CompareMask, op.Value, op.Mask)
		} else {
			old, err = c.ep.MaskedFAA128(context.Background(), op.Addr, op.Value, op.Mask)
		}
		if err != nil {
			return false, err
		}
		c.traced(PhaseReleaseIA, t0)
	}
	return c.releaseAfter(g, k, Entry(old))
}

// releasePipelined hands the lock over at once with the token Algorithm 3
// computes (curRel+1), and posts the RelCnt bump that makes the entry say
// so without waiting for it (Config.PipelineBump). Until the bump completes
// g stays counted as holding the entry, so that a recovery probe cannot
// reset it under a bump still in flight; the successor knows bumps may be
// in flight (flagBumpsInFlight) and waits for them where RelCnt matters.
func (c *Client) releasePipelined(g *Guard) error {
	op := c.releaseVerb(g, relHandover)
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		defer c.released(g)
		if _, err := c.ep.MaskedFAA128(context.Background(), op.Addr, op.Value, op.Mask); err != nil {
			c.log.Warn("pipelined RelCnt bump failed; the successor's release will wait for it and then leave the entry to recovery",
				zap.Uint64("entry", g.entry), zap.Error(err))
		}
	}()
	_, err := c.releaseAfter(g, relPipelined, Entry{})
	return err
}

// awaitBumps waits until RelCnt has caught up with g.curRel, i.e. every
// RelCnt bump of the pipelined handovers before g has landed. They were
// posted before their handovers were sent, so this is about a round trip;
// a bump whose poster died before posting it never lands, and past
// SuccessorTimeout the release gives up and leaves the entry to recovery.
func (c *Client) awaitBumps(g *Guard) error {
	c.stats.BumpWaits.Add(1)
	w := c.newWaiter(g.entry, g.curRel, 0)
	defer w.stop()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.SuccessorTimeout)
	defer cancel()
	_, err := w.poll(ctx, func(e Entry) bool { return !behind(e.RelCnt(), g.curRel) })
	switch {
	case err == nil:
		g.maybeLag = false
		return nil
	case errors.Is(err, errReset):
		c.stats.Lost.Add(1)
		return ErrLost
	case ctx.Err() != nil:
		c.stats.Lost.Add(1)
		return fmt.Errorf("%w: entry %d: RelCnt bumps before relcnt %d never landed", ErrLost, g.entry, g.curRel)
	}
	return err
}

// released ends g's slot once its release is done.
func (c *Client) released(g *Guard) {
	c.holds.add(g.entry, -1, 0)
	c.closeSlot(g)
}

// relKind is what a writer's release has to do, decided before any verb.
type relKind uint8

const (
	relClose      relKind = iota // nobody announced: close the queue with one CAS
	relHandover                  // hand over to the successor: bump RelCnt with one FAA, then Send
	relModeChange                // N writers in a row: flip the epoch with one FAA, then Send
	relSendOnly                  // hand over without a bump (Config.NoHandoverBump)
	relPipelined                 // hand over at once, the bump's FAA posted without waiting (Config.PipelineBump)
)

// releasePlan picks up a Successor that has already arrived and decides
// the release's one atomic.
func (c *Client) releasePlan(g *Guard) relKind {
	c.drainSlot(g)
	switch {
	case !g.hasSucc:
		return relClose
	case int(g.consWrt+1) >= c.cfg.Threshold:
		return relModeChange
	case c.cfg.NoHandoverBump:
		return relSendOnly
	case c.cfg.PipelineBump:
		return relPipelined
	}
	return relHandover
}

// releaseVerb is the release's atomic for plan k.
func (c *Client) releaseVerb(g *Guard, k relKind) rdma.Op {
	addr := c.layout.EntryAddr(g.entry)
	switch k {
	case relClose:
		// Close the queue, giving the lock to readers (flip Epoch) and
		// counting our release, all in one CAS that succeeds only if we
		// are still the tail. It also compares RelCnt and Epoch with what
		// this holder believes: the algorithm guarantees they match, and
		// if they ever do not, failing loudly beats writing a RelCnt that
		// would corrupt every later reader count.
		mask := rdma.MaskOf(fTail, fRelCnt, fEpoch)
		return rdma.Op{Verb: rdma.VerbMaskedCAS, Wide: true, Addr: addr,
			Compare: g.self.value().Or(fRelCnt.Value(g.curRel)).Or(fEpoch.Value(g.epoch)), CompareMask: mask,
			Value: fRelCnt.Value(g.curRel + 1).Or(fEpoch.Value(1 - g.epoch)), Mask: mask}
	case relModeChange:
		// Enough writers in a row: let the waiting readers in (§3.5). The
		// FAA flips Epoch, counts our release, and tells us how many readers
		// the successor must wait for.
		return rdma.Op{Verb: rdma.VerbMaskedFAA, Wide: true, Addr: addr, Value: fEpoch.Value(1).Or(fRelCnt.Value(1)), Mask: boundary}
	}
	// Algorithm 3 line 20: count the release so that RelCnt shows progress
	// to failure detectors and fencing tokens stay unique.
	return rdma.Op{Verb: rdma.VerbMaskedFAA, Wide: true, Addr: addr, Value: fRelCnt.Value(1), Mask: boundary}
}

// releaseAfter completes the release once its atomic returned old (for
// relSendOnly, there was none). slow means the closing CAS found a writer
// that swapped the tail after us and has not announced itself yet: the rest
// (releaseSlow) may wait for its Successor.
func (c *Client) releaseAfter(g *Guard, k relKind, e Entry) (slow bool, err error) {
	switch k {
	case relClose:
		if e.Tail() == g.self {
			if e.RelCnt() == g.curRel && e.Epoch() == g.epoch {
				return false, nil
			}
			if e.Epoch() == g.epoch && behind(e.RelCnt(), g.curRel) {
				// A pipelined bump ahead of us has not landed: the CAS
				// compared RelCnt too early. Wait for it and close again.
				g.lagging = true
				return true, nil
			}
			c.stats.Lost.Add(1)
			if leaped(e.RelCnt(), g.curRel) {
				return false, ErrLost
			}
			c.log.Error("lock entry does not match its holder's state; leaving it to recovery",
				zap.Uint64("entry", g.entry), zap.Stringer("entry_state", e), zap.Uint64("holder_relcnt", g.curRel), zap.Uint64("holder_epoch", g.epoch))
			return false, fmt.Errorf("%w: entry %d is %v, holder expected relcnt %d epoch %d", ErrLost, g.entry, e, g.curRel, g.epoch)
		}
		if e.Tail().IsZero() || leaped(e.RelCnt(), g.curRel) {
			c.stats.Lost.Add(1)
			return false, ErrLost
		}
		return true, nil
	case relModeChange:
		m := message{Kind: msgModeChanged, Entry: g.entry, Value: e.RelCnt() + e.Readers() + 1}
		m.Flags = uint8((1-e.Epoch())<<1) & 2
		if e.Readers() == 0 {
			m.Flags |= flagNoReaders
		}
		c.stats.ModeChanges.Add(1)
		return false, c.handTo(g, m)
	}
	rel := g.curRel
	if k == relHandover || k == relPipelined {
		rel++
	}
	flags := uint8(g.epoch<<1) & 2
	// The successor must know when RelCnt may lag behind its token: our
	// own bump is in flight, or our FAA found earlier ones still missing.
	if k == relPipelined || (k == relHandover && behind(e.RelCnt(), g.curRel)) || (k == relSendOnly && g.maybeLag) {
		flags |= flagBumpsInFlight
	}
	c.stats.Handovers.Add(1)
	return false, c.handTo(g, message{Kind: msgHandover, Entry: g.entry, U32: g.consWrt + 1, Value: rel, Flags: flags})
}

// releaseSlow finishes a release whose closing CAS lost to a new tail: the
// writer that swapped it in is announcing itself, and gets the lock handed
// over like any successor (with one more atomic).
//
// It also finishes one whose closing CAS found RelCnt lagging (g.lagging):
// it waits for the bumps in flight and tries again, which may again find a
// successor, or lag.
func (c *Client) releaseSlow(g *Guard) error {
	for {
		if g.lagging {
			g.lagging = false
			if err := c.awaitBumps(g); err != nil {
				return err
			}
		} else if !c.awaitSuccessor(g) {
			c.log.Warn("successor never announced itself; leaving the entry to recovery", zap.Uint64("entry", g.entry))
			return nil
		}
		k := c.releasePlan(g)
		if k == relPipelined {
			k = relHandover // off the fast path, nothing to gain
		}
		slow, err := c.releaseStep(g, k)
		if !slow {
			return err
		}
	}
}

func (c *Client) handTo(g *Guard, m message) error {
	succ, entry := g.succ, g.entry
	defer c.traced(PhaseReleaseNS, c.traceStart())
	c.send(context.Background(), succ, m, func(err error) {
		// The successor died after enqueueing. The lock is now stuck behind
		// a dead node; the writers behind it will have it recovered.
		c.log.Warn("handover failed; successor presumed dead", zap.Uint64("entry", entry), zap.Stringer("succ", succ), zap.Error(err))
	})
	return nil
}

// drainSlot picks up a Successor that has already arrived.
func (c *Client) drainSlot(g *Guard) {
	for !g.hasSucc {
		select {
		case rm := <-g.ch:
			g.accept(rm)
		default:
			return
		}
	}
}

func (c *Client) awaitSuccessor(g *Guard) bool {
	t := time.NewTimer(c.cfg.SuccessorTimeout)
	defer t.Stop()
	for !g.hasSucc {
		select {
		case rm := <-g.ch:
			g.accept(rm)
		case <-t.C:
			return false
		}
	}
	return true
}
