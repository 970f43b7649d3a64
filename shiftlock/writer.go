package shiftlock

import (
	"context"
	"encoding/binary"
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

// AcquireExclusiveTagged is AcquireExclusive with an owner tag
// (Config.OwnerTags). The tag travels in the Successor notification, and the
// predecessor installs it in the owner word with its handover, at no extra
// round trip. A writer granted any other way (an empty queue, after
// readers) finds the word 0. Either way the tag in the owner word only says
// that the lock has reached this waiter, not that the caller has been told:
// a waiter abandoned by its caller still receives the lock, and releases it
// at once. Callers that need "granted to my client" confirm it themselves
// with Guard.SetOwner.
func (c *Client) AcquireExclusiveTagged(ctx context.Context, i, tag uint64) (*Guard, error) {
	if err := c.checkEntry(i); err != nil {
		return nil, err
	}
	for {
		g, err := c.acquireExclusive(ctx, i, tag)
		if errors.Is(err, errReset) {
			c.stats.Resets.Add(1)
			continue
		}
		return g, err
	}
}

func (c *Client) openSlot(i uint64) (*Guard, error) {
	t, ch, err := c.inbox.Open()
	if err != nil {
		return nil, err
	}
	return &Guard{c: c, entry: i, mode: Exclusive, self: Tail{Node: c.ep.Node(), Target: t}, ch: ch}, nil
}

func (c *Client) closeSlot(g *Guard) { c.inbox.Close(g.self.Target) }

func (c *Client) acquireExclusive(ctx context.Context, i, tag uint64) (*Guard, error) {
	g, err := c.openSlot(i)
	if err != nil {
		return nil, err
	}
	g.tag = tag
	addr := c.layout.EntryAddr(i)
	c.holds.add(i, 1, 0) // may hold as soon as the CAS lands
	// Fetch-and-store of TailPtr: a masked CAS with an empty compare mask.
	// The verb must not be abandoned half-way by the caller's deadline.
	old, err := c.ep.MaskedCAS128(context.WithoutCancel(ctx), addr, rdma.U128{}, rdma.U128{}, g.self.value(), fTail.Mask())
	if err != nil {
		c.holds.add(i, -1, 0)
		c.closeSlot(g)
		return nil, err
	}
	arrived(ctx)
	e := Entry(old)
	g.curRel, g.epoch = e.RelCnt(), e.Epoch()
	pred := e.Tail()
	switch {
	case !pred.IsZero():
		c.holds.add(i, -1, 1)
		w := c.newWaiter(i, e.RelCnt(), pred.Node)
		// The Successor notification carries our owner tag: the predecessor
		// installs it with its handover, in the same round trip.
		c.send(ctx, pred, message{Kind: msgSuccessor, U32: uint32(g.self.Target), Entry: i, Value: tag}, func(err error) {
			// The predecessor is gone: only recovery can unblock us.
			c.log.Warn("successor notification failed", zap.Uint64("entry", i), zap.Stringer("pred", pred), zap.Error(err))
			w.blockerDown.Store(true)
		})
		if err := c.waitHandover(ctx, g, w); err != nil {
			return nil, err
		}
		c.holds.add(i, 1, -1)
		if g.granted == msgModeChanged {
			g.tag = 0 // after readers, nobody installed our tag
		}
	case e.Readers() != 0:
		// Readers before us: we own the lock once each has released, i.e.
		// once RelCnt has advanced by their number.
		c.holds.add(i, -1, 1)
		target := e.RelCnt() + e.Readers()
		w := c.newWaiter(i, e.RelCnt(), 0)
		finish := func(ctx context.Context) error {
			overshot := false
			if _, err := w.poll(ctx, func(e Entry) bool {
				if d := e.RelCnt() - target; d != 0 && !leaped(e.RelCnt(), target) && !overshot {
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
			return nil
		}
		err := finish(ctx)
		w.stop()
		if err != nil {
			return nil, c.abandonExclusive(ctx, g, w, err, finish)
		}
		c.holds.add(i, 1, -1)
		g.tag = 0 // no predecessor installed our tag
	default:
		c.stats.Immediate.Add(1)
		g.tag = 0
	}
	g.token = g.curRel
	c.stats.ExclusiveGrants.Add(1)
	return g, nil
}

// waitHandover waits for the predecessor's Handover or ModeChanged and, for
// a mode change, for the readers it let in to leave.
//
// The wait is resumable: if the caller gives up half-way, the background
// completion carries on from where it stopped rather than waiting again for
// a message it already consumed.
func (c *Client) waitHandover(ctx context.Context, g *Guard, w *waiter) error {
	var got bool
	var m message
	finish := func(ctx context.Context) error {
		if !got {
			var err error
			if m, err = w.await(ctx, g); err != nil {
				return err
			}
			got = true
		}
		return c.takeHandover(ctx, g, w, m)
	}
	err := finish(ctx)
	w.stop()
	if err != nil {
		return c.abandonExclusive(ctx, g, w, err, finish)
	}
	return nil
}

func (c *Client) takeHandover(ctx context.Context, g *Guard, w *waiter, m message) error {
	switch m.Kind {
	case msgHandover:
		// A grant by message comes from a live holder, which a recovery
		// probe would have found, so no freeze applies here.
		g.curRel, g.consWrt, g.epoch = m.Value, m.U32, uint64(m.Flags>>1&1)
		g.granted = msgHandover
		return nil
	case msgModeChanged:
		g.granted = msgModeChanged
		// The predecessor flipped the epoch for the readers that were
		// waiting; we own the lock once they, and it, have released.
		g.curRel, g.consWrt, g.epoch = m.Value, 0, uint64(m.Flags>>1&1)
		if m.Flags&flagNoReaders != 0 {
			return nil
		}
		_, err := w.poll(ctx, func(e Entry) bool { return e.RelCnt() == m.Value })
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
		c.holds.add(g.entry, 1, -1)
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
	g, ok, _, _, err := c.TryExclusiveTagged(ctx, i)
	return g, ok, err
}

// TryExclusiveTagged is TryExclusive for callers that keep owner words
// (Config.OwnerTags): the CAS and a READ of the owner word go out in one
// batch, so a failed try also returns the holder's owner word and the entry
// (whose RelCnt is an exclusive holder's token), at no extra round trip. A
// successful try leaves the owner word to the caller (Guard.SetOwner).
func (c *Client) TryExclusiveTagged(ctx context.Context, i uint64) (g *Guard, ok bool, owner uint64, e Entry, err error) {
	if err := c.checkEntry(i); err != nil {
		return nil, false, 0, Entry{}, err
	}
	g, err = c.openSlot(i)
	if err != nil {
		return nil, false, 0, Entry{}, err
	}
	c.holds.add(i, 1, 0)
	cctx := context.WithoutCancel(ctx)
	addr := c.layout.EntryAddr(i)
	var old rdma.U128
	if c.cfg.OwnerTags {
		var ob [8]byte
		var b rdma.Batch
		ci := b.MaskedCAS128(addr, rdma.U128{}, rdma.MaskOf(fTail, fRdrCnt), g.self.value(), fTail.Mask())
		b.Read(c.layout.OwnerAddr(i), ob[:])
		if err = c.ep.Post(cctx, &b); err == nil {
			err = b.FirstErr()
		}
		old, owner = b.Old(ci), binary.LittleEndian.Uint64(ob[:])
	} else {
		old, err = c.ep.MaskedCAS128(cctx, addr, rdma.U128{}, rdma.MaskOf(fTail, fRdrCnt), g.self.value(), fTail.Mask())
	}
	e = Entry(old)
	if err != nil || !e.Free() {
		c.holds.add(i, -1, 0)
		c.closeSlot(g)
		if err == nil {
			c.stats.TryFailures.Add(1)
		}
		return nil, false, owner, e, err
	}
	g.curRel, g.epoch, g.token = e.RelCnt(), e.Epoch(), e.RelCnt()
	c.stats.Immediate.Add(1)
	c.stats.ExclusiveGrants.Add(1)
	return g, true, 0, e, nil
}

// SetOwner writes the entry's owner word while g holds it (one round trip);
// releases clear it, or hand it to the successor. Config.OwnerTags must be on.
func (g *Guard) SetOwner(ctx context.Context, word uint64) error {
	c := g.c
	if !c.cfg.OwnerTags {
		return errors.New("shiftlock: owner tags are off")
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], word)
	if err := c.ep.Write(context.WithoutCancel(ctx), c.layout.OwnerAddr(g.entry), b[:]); err != nil {
		return err
	}
	g.tag = word
	return nil
}

// withOwner posts the atomic that add puts in a batch, preceded, with owner
// tags on and something to change, by a WRITE of the owner word: the memory
// node executes a batch in order, so the owner word changes hands exactly as
// the lock does, in one round trip.
func (c *Client) withOwner(ctx context.Context, g *Guard, owner uint64, add func(b *rdma.Batch) int) (rdma.U128, error) {
	var b rdma.Batch
	if c.cfg.OwnerTags && (owner != 0 || g.tag != 0) {
		var ob [8]byte
		binary.LittleEndian.PutUint64(ob[:], owner)
		b.Write(c.layout.OwnerAddr(g.entry), ob[:])
	}
	i := add(&b)
	if err := c.ep.Post(ctx, &b); err != nil {
		return rdma.U128{}, err
	}
	if err := b.FirstErr(); err != nil {
		return rdma.U128{}, err
	}
	return b.Old(i), nil
}

// releaseExclusive is Algorithm 3's WRITER-RELEASE.
func (c *Client) releaseExclusive(ctx context.Context, g *Guard) error {
	defer c.closeSlot(g)
	defer c.holds.add(g.entry, -1, 0)
	ctx = context.WithoutCancel(ctx)
	addr := c.layout.EntryAddr(g.entry)
	if !g.hasSucc {
		c.drainSlot(g)
	}
	if !g.hasSucc {
		// Nobody announced themselves: try to close the queue, giving the
		// lock to readers (flip Epoch) and counting our release, all in one
		// CAS that succeeds only if we are still the tail. It also compares
		// RelCnt and Epoch with what this holder believes: the algorithm
		// guarantees they match, and if they ever do not, failing loudly beats
		// writing a RelCnt that would corrupt every later reader count.
		cmp := g.self.value().Or(fRelCnt.Value(g.curRel)).Or(fEpoch.Value(g.epoch))
		swap := fRelCnt.Value(g.curRel + 1).Or(fEpoch.Value(1 - g.epoch))
		old, err := c.withOwner(ctx, g, 0, func(b *rdma.Batch) int {
			return b.MaskedCAS128(addr, cmp, rdma.MaskOf(fTail, fRelCnt, fEpoch), swap, rdma.MaskOf(fTail, fRelCnt, fEpoch))
		})
		if err != nil {
			return err
		}
		g.tag = 0
		e := Entry(old)
		if e.Tail() == g.self {
			if e.RelCnt() == g.curRel && e.Epoch() == g.epoch {
				return nil
			}
			c.stats.Lost.Add(1)
			if leaped(e.RelCnt(), g.curRel) {
				return ErrLost
			}
			c.log.Error("lock entry does not match its holder's state; leaving it to recovery",
				zap.Uint64("entry", g.entry), zap.Stringer("entry_state", e), zap.Uint64("holder_relcnt", g.curRel), zap.Uint64("holder_epoch", g.epoch))
			return fmt.Errorf("%w: entry %d is %v, holder expected relcnt %d epoch %d", ErrLost, g.entry, e, g.curRel, g.epoch)
		}
		if e.Tail().IsZero() || leaped(e.RelCnt(), g.curRel) {
			c.stats.Lost.Add(1)
			return ErrLost
		}
		// Someone swapped the tail after us; its Successor is on the way.
		if !c.awaitSuccessor(g) {
			c.log.Warn("successor never announced itself; leaving the entry to recovery",
				zap.Uint64("entry", g.entry), zap.Stringer("tail", e.Tail()))
			return nil
		}
	}
	next := g.consWrt + 1
	if int(next) >= c.cfg.Threshold {
		// Enough writers in a row: let the waiting readers in (§3.5). The
		// FAA flips Epoch, counts our release, and tells us how many readers
		// the successor must wait for.
		old, err := c.withOwner(ctx, g, 0, func(b *rdma.Batch) int {
			return b.MaskedFAA128(addr, fEpoch.Value(1).Or(fRelCnt.Value(1)), boundary)
		})
		if err != nil {
			return err
		}
		e := Entry(old)
		m := message{Kind: msgModeChanged, Entry: g.entry, Value: e.RelCnt() + e.Readers() + 1}
		m.Flags = uint8((1-e.Epoch())<<1) & 2
		if e.Readers() == 0 {
			m.Flags |= flagNoReaders
		}
		c.stats.ModeChanges.Add(1)
		return c.handTo(ctx, g, m)
	}
	rel := g.curRel
	if !c.cfg.NoHandoverBump {
		// Algorithm 3 line 20: count the release so that RelCnt shows
		// progress to failure detectors and fencing tokens stay unique. The
		// successor's owner tag goes in with it.
		if _, err := c.withOwner(ctx, g, g.succTag, func(b *rdma.Batch) int {
			return b.MaskedFAA128(addr, fRelCnt.Value(1), boundary)
		}); err != nil {
			return err
		}
		rel++
	} else if c.cfg.OwnerTags && (g.succTag != 0 || g.tag != 0) {
		var ob [8]byte
		binary.LittleEndian.PutUint64(ob[:], g.succTag)
		if err := c.ep.Write(ctx, c.layout.OwnerAddr(g.entry), ob[:]); err != nil {
			return err
		}
	}
	c.stats.Handovers.Add(1)
	return c.handTo(ctx, g, message{Kind: msgHandover, Entry: g.entry, U32: next, Value: rel, Flags: uint8(g.epoch<<1) & 2})
}

func (c *Client) handTo(ctx context.Context, g *Guard, m message) error {
	succ, entry := g.succ, g.entry
	c.send(ctx, succ, m, func(err error) {
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
