package resp

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
)

// An acquire that queued behind a holder on an in-process memory node
// (acquireInline) is waited for by its connection's event loop, not by a
// goroutine (issue 33: one release in, one grant out). The release that
// hands the lock over delivers a Handover to the waiter's slot; the slot's
// notification puts the wait on its connection's ready list and wakes the
// connection, whose loop takes the handover (lockmap.Queued.TryWait) and
// answers. A goroutine blocked in Queued.Wait cost a scheduler round trip,
// a wait context and two timers per handover, and its reply one more wake
// of the loop.
//
// Anything TryWait cannot finish without blocking, the wait budget's end,
// the lock's next failure check and the client hanging up hand the wait to
// a goroutine, as before (inlineWait.slow): Queued.Wait goes on from where
// TryWait left it.

// loopWaits are a loop connection's acquires waited for on its loop.
type loopWaits struct {
	wake func() // has the loop call onTraffic for the connection

	mu     sync.Mutex
	any    atomic.Bool   // ready is not empty: set and cleared under mu
	ready  []*inlineWait // told of a message: to step on the loop
	spare  []*inlineWait
	live   map[*inlineWait]struct{}
	closed bool
}

// inlineWait is one acquire its connection's loop waits for.
type inlineWait struct {
	lw    *loopWaits
	srv   *Server
	q     *lockmap.Queued
	ctx   context.Context
	p     *pending // where its reply goes
	reply func(*replyWriter, uint64, bool, error)
	stopQ func() // the Queue hook's stop: the connection's wait accounting
	timer *time.Timer

	// state is iwArmed while nobody looks at the wait: the first to claim
	// it (a message's notification, the timer, the connection closing)
	// moves it on. poke and late say why it is looked at; they are set
	// before the claim is tried, and checked after the wait is armed again,
	// so that neither is lost while the loop has it.
	state atomic.Int32
	poke  atomic.Bool // a message came
	late  atomic.Bool // the timer fired, or the client hung up
}

const (
	iwArmed int32 = iota
	iwClaimed
)

// waitOnLoop has the loop wait for q, the deferred acquire of the command
// running on st, and answer p with reply. It reports false if q must be
// waited for with Wait.
func (st *connState) waitOnLoop(q *lockmap.Queued, p *pending, queue func(context.Context) (context.Context, func()), reply func(*replyWriter, uint64, bool, error)) bool {
	lw := st.loopWaits
	lw.mu.Lock()
	if lw.closed {
		lw.mu.Unlock()
		return false
	}
	iw := &inlineWait{lw: lw, srv: st.srv, q: q, ctx: st.base, p: p, reply: reply}
	iw.state.Store(iwClaimed) // the loop has it until the first step arms it
	if lw.live == nil {
		lw.live = map[*inlineWait]struct{}{}
	}
	lw.live[iw] = struct{}{}
	lw.mu.Unlock()
	if !q.Notify(iw.notify) {
		lw.forget(iw)
		return false
	}
	if queue != nil {
		_, iw.stopQ = queue(iw.ctx)
	}
	queuedInline.Add(1)
	iw.timer = time.AfterFunc(time.Until(q.WakeAt()), iw.fire)
	iw.step()
	return true
}

// notify is the slot's notification: a message that may end the wait
// came. Any goroutine; it never blocks.
func (iw *inlineWait) notify() {
	iw.poke.Store(true)
	if iw.state.CompareAndSwap(iwArmed, iwClaimed) {
		iw.lw.push(iw)
	}
}

// fire ends the loop's wait: the budget's end or the failure check is
// due, or the client hung up. Queued.Wait takes over.
func (iw *inlineWait) fire() {
	iw.late.Store(true)
	if iw.state.CompareAndSwap(iwArmed, iwClaimed) {
		iw.slow()
	}
}

// push puts iw on the ready list and wakes the connection.
func (lw *loopWaits) push(iw *inlineWait) {
	lw.mu.Lock()
	if lw.closed {
		// The loop no longer serves the connection: nobody would step it.
		lw.mu.Unlock()
		iw.late.Store(true)
		iw.slow()
		return
	}
	lw.ready = append(lw.ready, iw)
	lw.any.Store(true)
	lw.mu.Unlock()
	lw.wake()
}

// run steps the waits told of a message. On the loop.
func (lw *loopWaits) run() {
	if !lw.any.Load() {
		return
	}
	lw.mu.Lock()
	rs := lw.ready
	lw.ready = lw.spare[:0]
	lw.any.Store(false)
	lw.mu.Unlock()
	for i, iw := range rs {
		iw.step()
		rs[i] = nil
	}
	lw.mu.Lock()
	lw.spare = rs[:0]
	lw.mu.Unlock()
}

// close is told that the connection closed: waits the loop has not
// finished go on with Queued.Wait, whose context has ended, so that a lock
// that still comes is released at once. On the loop.
func (lw *loopWaits) close() {
	lw.mu.Lock()
	lw.closed = true
	rs := lw.ready
	lw.ready = nil
	lw.any.Store(false)
	all := make([]*inlineWait, 0, len(lw.live))
	for iw := range lw.live {
		all = append(all, iw)
	}
	lw.mu.Unlock()
	for _, iw := range rs {
		iw.late.Store(true)
		iw.slow()
	}
	for _, iw := range all {
		iw.fire()
	}
}

func (lw *loopWaits) forget(iw *inlineWait) {
	lw.mu.Lock()
	delete(lw.live, iw)
	lw.mu.Unlock()
}

// step looks at a claimed wait, on the loop: it answers a handover, hands
// the wait to a goroutine when it must, or arms it again.
func (iw *inlineWait) step() {
	for {
		iw.poke.Store(false)
		fence, ok, done, must, err := iw.q.TryWait(iw.ctx)
		switch {
		case done:
			iw.srv.loopGrants.Add(1)
			iw.end()
			iw.p.complete(func(w *replyWriter) { iw.reply(w, fence, ok, err) })
			return
		case must || iw.late.Load():
			iw.slow()
			return
		}
		iw.state.Store(iwArmed)
		if !iw.poke.Load() && !iw.late.Load() {
			return
		}
		if !iw.state.CompareAndSwap(iwArmed, iwClaimed) {
			return // the notification or the timer has it
		}
	}
}

// slow hands a claimed wait to a goroutine: Queued.Wait, as an acquire on
// a redcon connection waits.
func (iw *inlineWait) slow() {
	iw.srv.loopWaitsOff.Add(1)
	iw.q.Notify(nil)
	iw.srv.waiters.run(func() {
		fence, ok, err := iw.q.Wait(iw.ctx, queuedAlready)
		iw.end()
		iw.p.done(func(w *replyWriter) { iw.reply(w, fence, ok, err) })
	})
}

// end is the wait's end, either way.
func (iw *inlineWait) end() {
	iw.timer.Stop()
	iw.lw.forget(iw)
	if iw.stopQ != nil {
		iw.stopQ()
	}
	queuedInline.Add(-1)
}

// queuedAlready is the Queue hook of a wait that was told it queued when
// the loop began waiting for it.
func queuedAlready(ctx context.Context) (context.Context, func()) { return ctx, func() {} }
