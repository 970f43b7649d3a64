package shiftlock

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// waiter is one blocked acquisition: how it polls, and how it decides that
// what it waits for will never come (ShiftLock §3.6; docs/reliability.md).
type waiter struct {
	c     *Client
	entry uint64
	// base is RelCnt when the wait began. A recovery adds rdma.RecoveryLeap,
	// so a value far past base means the entry was reset under us.
	base uint64
	// mark is the hold table's probe count when the wait began (enter).
	mark uint32
	// blocker is the node whose death would strand us: the predecessor of a
	// queued writer, or the tail a reader queued behind. Zero if unknown.
	blocker     rdma.NodeID
	blockerDown atomic.Bool // a Send to the blocker failed

	lastRel   uint64
	lastMove  time.Time
	lastCheck time.Time // or the wait's start (checkPace)
	nextCheck time.Time
	stale     time.Duration // current patience before asking for recovery
	refusals  int
	timer     *time.Timer
	// stash is a message that Start.TryWait took off the slot and left for
	// the blocking wait (await returns it first), accepted already.
	stash *message
}

func (c *Client) newWaiter(entry, base uint64, blocker rdma.NodeID) *waiter {
	now := time.Now()
	return &waiter{
		c: c, entry: entry, base: base, blocker: blocker,
		lastRel: base, lastMove: now,
		lastCheck: now,
		nextCheck: now.Add(c.pace.next(now, c.cfg.CheckInterval, 0)),
		stale:     c.cfg.StaleAfter,
	}
}

// checkPace spreads the failure checks of a client's waiters so that
// together they run about checkBudget times per CheckInterval. Each check
// wakes its waiter and reads the memory node: at one per CheckInterval
// each, 20,000 waiters on one proxy (one hot key, a thundering herd of
// callers) spent the proxy's CPU on checks, and the handover chain behind
// them slowed to a few grants a second. Past the budget every waiter's
// interval grows in proportion to the waiters, so that a long queue detects
// a failure later (CheckInterval times waiters/checkBudget) and a short one
// as before.
//
// It counts checks, not waiters, so nothing can leak: each check adds the
// time since its waiter's previous one, in CheckIntervals, and over one
// CheckInterval those add up to the number of waiters. (Pacing by the
// checks counted instead settles at the square root of waiters times the
// budget.)
type checkPace struct {
	mu    sync.Mutex
	start time.Time // of the current window, CheckInterval long
	sum   float64   // waiters seen in it: the checks' elapsed times over CheckInterval
	prev  float64   // in the window before it (0 if that one is older)
}

// checkBudget is how many checks a client's waiters run per CheckInterval
// before their intervals grow: 10,000 a second at the default 100 ms.
const checkBudget = 1000

// next counts a check at now whose waiter last checked (or began) elapsed
// ago (0: a new waiter, not a check), and returns the interval until the
// waiter's next check.
func (p *checkPace) next(now time.Time, base, elapsed time.Duration) time.Duration {
	p.mu.Lock()
	if d := now.Sub(p.start); d >= base {
		p.prev = p.sum
		if d >= 2*base {
			p.prev = 0
		}
		p.start, p.sum = now, 0
	}
	p.sum += float64(elapsed) / float64(base)
	waiters := max(p.prev, p.sum)
	p.mu.Unlock()
	if waiters <= checkBudget {
		return base
	}
	// Jittered, so that waiters that came together do not check together.
	return time.Duration(float64(base) * waiters / checkBudget * (0.9 + 0.2*rand.Float64()))
}

func (w *waiter) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// sleep waits d or until ctx ends.
func (w *waiter) sleep(ctx context.Context, d time.Duration) error {
	if w.timer == nil {
		w.timer = time.NewTimer(d)
	} else {
		w.timer.Reset(d)
	}
	select {
	case <-w.timer.C:
		return nil
	case <-ctx.Done():
		// Since Go 1.23 Stop guarantees no stale tick; draining would block.
		w.timer.Stop()
		return ctx.Err()
	}
}

// observe tracks progress and spots a recovery.
func (w *waiter) observe(e Entry) error {
	if r := e.RelCnt(); r != w.lastRel {
		w.lastRel, w.lastMove = r, time.Now()
	}
	if leaped(e.RelCnt(), w.base) {
		return errReset
	}
	return nil
}

// poll READs the entry until cond holds, backing off from PollMin to
// PollMax. A condition met while a recovery probe froze the entry is only
// trusted after the freeze, on a fresh read.
func (w *waiter) poll(ctx context.Context, cond func(Entry) bool) (Entry, error) {
	iv := w.c.cfg.PollMin
	for {
		e, err := w.c.Read(context.Background(), w.entry)
		if err != nil {
			return e, err
		}
		if err := w.observe(e); err != nil {
			return e, err
		}
		if cond(e) {
			d := w.c.holds.frozen(w.entry)
			if d <= 0 {
				return e, nil
			}
			if err := w.sleep(ctx, d); err != nil {
				return e, err
			}
			continue
		}
		if !time.Now().Before(w.nextCheck) {
			if err := w.check(ctx); err != nil {
				return e, err
			}
		}
		if err := w.sleep(ctx, iv); err != nil {
			return e, err
		}
		if iv *= 2; iv > w.c.cfg.PollMax {
			iv = w.c.cfg.PollMax
		}
	}
}

// await waits for a Handover or ModeChanged on g's slot, stashing a
// Successor that arrives first, and runs failure checks meanwhile.
func (w *waiter) await(ctx context.Context, g *Guard) (message, error) {
	if m := w.stash; m != nil {
		w.stash = nil
		return *m, nil
	}
	for {
		d := time.Until(w.nextCheck)
		if w.timer == nil {
			w.timer = time.NewTimer(d)
		} else {
			w.timer.Reset(d)
		}
		select {
		case rm := <-g.ch:
			w.timer.Stop()
			m, ok := g.accept(rm)
			if !ok {
				continue
			}
			if m.Kind == msgSuccessor {
				continue
			}
			return m, nil
		case <-w.timer.C:
			if err := w.check(ctx); err != nil {
				return message{}, err
			}
		case <-ctx.Done():
			w.timer.Stop()
			return message{}, ctx.Err()
		}
	}
}

// check is the periodic failure check: one batch reading the entry, its era
// counter and the blocker's node-table status. It asks the memory node for
// recovery when the blocker is dead, or when nothing has moved for too long.
func (w *waiter) check(ctx context.Context) error {
	c := w.c
	now := time.Now()
	w.nextCheck = now.Add(c.pace.next(now, c.cfg.CheckInterval, now.Sub(w.lastCheck)))
	w.lastCheck = now
	// A poller that saw RelCnt move within the last interval has its
	// answer without asking: a dead blocker stops the releases it waits
	// for, so the check resumes once they stop, and the poll's own reads
	// catch a recovery's leap. Waiters for a message never observe between
	// checks, so this never skips theirs.
	if !w.blockerDown.Load() && now.Sub(w.lastMove) < c.cfg.CheckInterval {
		c.stats.ChecksSkipped.Add(1)
		return nil
	}
	var eb [16]byte
	var era, status [8]byte
	var b rdma.Batch
	b.Read(c.layout.EntryAddr(w.entry), eb[:])
	if w.blocker != 0 {
		slot := c.layout.NodeSlotAddr(w.blocker)
		b.Read(rdma.Addr{Region: slot.Region, Offset: slot.Offset + rdma.SlotStatus}, status[:])
	}
	if err := c.ep.Post(context.Background(), &b); err != nil {
		return err
	}
	if err := b.FirstErr(); err != nil {
		return err
	}
	e := Entry(rdma.U128From(eb[:]))
	if err := w.observe(e); err != nil {
		return err
	}
	dead := w.blockerDown.Load() || binary.LittleEndian.Uint64(status[:]) == rdma.SlotDead
	if !dead && now.Sub(w.lastMove) < w.stale {
		return nil
	}
	suspect := rdma.NodeID(0)
	if dead {
		suspect = w.blocker
	}
	// The era is only needed to ask for recovery, which is rare: reading it
	// here instead of with every check saves a READ per check. The entry is
	// read again with it, as before, so that a recovery that happened since
	// is seen as the leap it is rather than asked for a second time.
	var rb rdma.Batch
	rb.Read(c.layout.EntryAddr(w.entry), eb[:])
	rb.Read(c.layout.EraAddr(w.entry), era[:])
	if err := c.ep.Post(context.Background(), &rb); err != nil {
		return err
	}
	if err := rb.FirstErr(); err != nil {
		return err
	}
	if leaped(Entry(rdma.U128From(eb[:])).RelCnt(), w.base) {
		return errReset
	}
	c.stats.RecoveryRequests.Add(1)
	rep, err := c.ep.Control().Recover(context.Background(), rdma.RecoverRequest{
		Entry: w.entry, Era: binary.LittleEndian.Uint64(era[:]), Suspect: suspect,
	})
	if err != nil {
		if errors.Is(err, rdma.ErrFenced) {
			return err
		}
		c.log.Warn("recovery request failed", zap.Uint64("entry", w.entry), zap.Error(err))
		return nil
	}
	switch rep.Status {
	case rdma.RecoverDone:
		c.log.Info("entry recovered", zap.Uint64("entry", w.entry), zap.Uint16("suspect", uint16(suspect)))
		return errReset
	case rdma.RecoverRefused:
		// Somebody alive still holds it, or a dead node's lease is running:
		// ask again when the memory node suggests, backing off so that a
		// long-held lock does not turn its waiters into a probe storm.
		w.lastMove = now
		if w.stale *= 2; w.stale > 30*time.Second {
			w.stale = 30 * time.Second
		}
		w.refusals++
		back := c.cfg.CheckInterval << min(w.refusals, 6)
		if rep.RetryAfter > back {
			back = rep.RetryAfter
		}
		w.nextCheck = now.Add(back)
	case rdma.RecoverNotYet:
		// The horizon's end is exact, and nothing else stands in the way
		// as far as the memory node knows: ask right then. Backing off
		// from earlier refusals (the suspect not yet declared dead) would
		// overshoot it by seconds.
		w.nextCheck = now.Add(rep.RetryAfter)
	}
	return nil
}
