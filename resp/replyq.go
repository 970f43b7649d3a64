package resp

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A connection never waits behind itself. Clients that multiplex their
// callers over one connection (ioredis, node-redis, StackExchange.Redis,
// Lettuce) send one caller's unlock or extend behind another caller's
// acquire that has to wait for the lock; if the connection ran nothing
// until that acquire was done, the unlock would wait behind the acquire it
// would have let through, and the extend would come after its lock had
// expired (issue 33). So a command that has to wait runs on a state of its
// own (connState), on a goroutine or as a deferred acquire on the event
// loop's doorbell, while the connection goes on with the commands behind
// it. What they answer is held until the replies ahead of them are out: a
// replyQueue keeps a connection's replies in the order of its commands.
//
// A command that has to wait is known to wait only once it has queued in
// its lock (the lockmap Queue hook); until then it is in flight (an atomic
// on its way to the memory node, a command run again on a goroutine), and
// a later command of the connection on one of its keys waits for it to
// settle, so that SET k t NX followed by GET k answers t, as on Redis. Once
// it has queued, the later commands run: an unlock of the key by another
// caller of the connection is what lets it through.
//
// Replies that are ready as soon as their command ran gather in the
// connection's writer (connState.w). When a command is left running, the
// replies gathered so far go into its pending entry, ahead of it, and the
// writer starts afresh for the commands behind it. The queue gives out, in
// order, every reply up to the first command still running.

// pending is a command still running, with the replies ahead of it.
type pending struct {
	// before are the replies of the commands ahead of this one that no
	// earlier entry holds.
	before []byte
	// x is the state the command runs on (a goroutine's); its reply is in
	// x.w once fin is set. nil: the reply is rendered by render, or there
	// is none (a barrier).
	x *connState
	// render, for a deferred acquire, writes its reply (set before fin).
	render func(*replyWriter)
	resp3  bool
	// gate, if set, must be done before this entry goes out too: the
	// barrier of the event-loop pass that ran the command (its replies may
	// tell of releases whose atomics are not in yet).
	gate *pending
	fin  atomic.Bool
	// keys are the command's keys; queued is set once it waits in a lock's
	// queue, after which commands behind it on those keys may run.
	keys   []string
	queued atomic.Bool
	// watched: a later command waits for this one to settle, so queueing
	// must wake the connection (otherwise finishing will).
	watched atomic.Bool
	// queueHook and done are the command's lockmap Queue hook and, for a
	// deferred acquire, its completion: both wake the connection.
	queueHook func(context.Context) (context.Context, func())
	done      func(render func(*replyWriter))
}

// deferTo has the lock command st is about to run on an event loop report
// an acquire it defers to *next, the entry its connection keeps for one;
// if it has none yet, one is made, whose wake has the connection served
// again.
func (st *connState) deferTo(next **pending, wake func()) {
	if *next == nil {
		*next = newPending(st.conn, wake)
	}
	st.pend, st.done, st.queueHook = *next, (*next).done, (*next).queueHook
}

// takeDeferred, once the command st ran (c, args) has deferred its
// acquire (st.deferred), clears that and returns the entry it reports to,
// *next, ready for the reply queue; the connection makes a new one for the
// next command that defers.
func (st *connState) takeDeferred(next **pending, c *command, args [][]byte) *pending {
	st.deferred = false
	p := *next
	*next = nil
	p.resp3, p.keys = st.w.resp3, keysOf(c, args)
	return p
}

// newPending is an entry for a command of c's that will go on running;
// wake has c served again.
func newPending(c *conn, wake func()) *pending {
	p := &pending{}
	p.queueHook = func(ctx context.Context) (context.Context, func()) {
		qctx, stop := c.queue(ctx)
		p.queued.Store(true)
		if p.watched.Load() {
			wake()
		}
		return qctx, stop
	}
	p.done = func(render func(*replyWriter)) {
		p.complete(render)
		wake()
	}
	return p
}

// inFlight reports whether the command is still running and not known to
// wait in a lock's queue.
func (p *pending) inFlight() bool { return !p.fin.Load() && !p.queued.Load() }

// touches reports whether key is one of the command's keys.
func (p *pending) touches(key []byte) bool {
	for _, k := range p.keys {
		if k == string(key) {
			return true
		}
	}
	return false
}

// complete is a deferred acquire's completion: its reply, rendered later.
// Any goroutine may call it, once.
func (p *pending) complete(render func(*replyWriter)) {
	p.render = render
	p.fin.Store(true)
}

// replyQueue is a connection's commands still running, in order, and the
// replies held behind them. It belongs to whoever serves the connection:
// the event loop, or (redcon) whoever holds the connection's write lock.
type replyQueue struct {
	q []*pending
	// held counts the bytes of ready replies held behind running commands,
	// against MaxOutputBytes.
	held int
}

// empty reports whether no command is running.
func (r *replyQueue) empty() bool { return len(r.q) == 0 }

// len is the number of commands still running (and barriers).
func (r *replyQueue) len() int { return len(r.q) }

// settling reports whether a command touching one of c's keys in args is
// in flight: the command must wait for it to finish or queue.
func (r *replyQueue) settling(c *command, args [][]byte) bool {
	if len(r.q) == 0 {
		return false
	}
	first, last, step := keySpan(c, args)
	for i := first; i <= last; i += step {
		for _, p := range r.q {
			if p.inFlight() && p.touches(args[i]) {
				// Watched before looked at again: a queue hook that
				// stores queued after this look sees watched and wakes.
				p.watched.Store(true)
				if p.inFlight() {
					return true
				}
			}
		}
	}
	return false
}

// keysOf copies c's keys in args, for the entry of a command left running.
func keysOf(c *command, args [][]byte) []string {
	var ks []string
	first, last, step := keySpan(c, args)
	for i := first; i <= last; i += step {
		ks = append(ks, string(args[i]))
	}
	return ks
}

// push queues p behind every entry, with w's replies ahead of it; w starts
// afresh.
func (r *replyQueue) push(p *pending, w *replyWriter) {
	p.before, w.b = w.b, nil
	r.held += len(p.before)
	r.q = append(r.q, p)
}

// drain appends to out every reply that may go out now, in order, and
// removes their entries; what follows the first command still running
// stays. A finished goroutine's state is handed to recycle (nil: dropped).
func (r *replyQueue) drain(out []byte, recycle func(*connState)) []byte {
	n := 0
	for _, p := range r.q {
		if p.gate != nil && !p.gate.fin.Load() {
			break
		}
		out = append(out, p.before...)
		r.held -= len(p.before)
		p.before = nil
		if !p.fin.Load() {
			break
		}
		switch {
		case p.x != nil:
			out = append(out, p.x.w.b...)
			if recycle != nil {
				recycle(p.x)
			}
		case p.render != nil:
			w := replyWriter{b: out, resp3: p.resp3}
			p.render(&w)
			out = w.b
		}
		n++
	}
	clear(r.q[:n])
	r.q = r.q[n:]
	if len(r.q) == 0 {
		r.q = r.q[:0:0] // let the backing array go with its entries
	}
	return out
}

// out appends w's replies behind the queue and leaves in w what may go out
// now, in order.
func (r *replyQueue) out(w *replyWriter, recycle func(*connState)) {
	if r.empty() {
		return
	}
	if len(w.b) > 0 {
		// Behind the commands still running: held in a finished entry of
		// its own.
		p := &pending{}
		p.fin.Store(true)
		r.push(p, w)
	}
	w.b = r.drain(w.b[:0], recycle)
}

// waiting sets up command c of st's connection, which has to wait, to run
// on x, a state of its own: its entry (not yet queued) and its arguments,
// copied out of the input buffer, which the connection reuses meanwhile.
func waiting(st, x *connState, c *command, args [][]byte, wake func()) (*pending, [][]byte) {
	x.w.resp3 = st.w.resp3
	p := newPending(st.conn, wake)
	p.x, p.keys = x, keysOf(c, args)
	x.queueHook = p.queueHook
	// A script's acquire that queued on the loop is waited for by the
	// script's run on x.
	x.queued, st.queued = st.queued, queuedAcquire{}
	return p, x.hold(args)
}

// goWait runs a command set up by waiting on a goroutine; wake tells the
// connection when it is done.
func (s *Server) goWait(p *pending, c *command, args [][]byte, wake func()) {
	s.offloaded.Add(1)
	offLoop.Add(1)
	s.waiters.run(func() {
		s.run(p.x, c, args) // counted (onCommand) when it was read
		p.x.queued.drop(p.x)
		p.fin.Store(true)
		offLoop.Add(-1)
		wake()
	})
}

// waiters runs the commands that have to wait, each on a goroutine, and
// keeps a goroutine that is done for the next one a while: a new one's
// stack grows several times along an acquire's path, and copying it was
// 6% of the proxy's CPU with 50 clients queued on a hot key. The zero
// value is ready.
type waiters struct {
	jobs chan func() // unbuffered: a send succeeds only to an idle goroutine
	once sync.Once
}

// waiterIdle is how long a goroutine with nothing to run waits for more.
const waiterIdle = 10 * time.Second

func (w *waiters) run(f func()) {
	w.once.Do(func() { w.jobs = make(chan func()) })
	select {
	case w.jobs <- f:
	default:
		go w.work(f)
	}
}

func (w *waiters) work(f func()) {
	t := time.NewTimer(waiterIdle)
	defer t.Stop()
	for {
		f()
		t.Reset(waiterIdle)
		select {
		case f = <-w.jobs:
		case <-t.C:
			return
		}
	}
}
