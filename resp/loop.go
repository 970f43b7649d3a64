package resp

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

// The event loop's batch logic, apart from gnet (gnet.go) so that tests and
// the fuzz target can drive it without sockets.
//
// Each time a connection's input grows, the loop runs every complete
// command buffered for it, in order, appends their replies to one buffer
// and writes that with one system call. A command must never block the
// loop, which serves every other connection too:
//
//   - commands that do not touch the lock table run on the loop;
//   - lock commands run on the loop too, on the map as the loop sees it
//     (lockmap.Loop, which never blocks), with the
//     loop's doorbell (loopBell): a release posts its atomic on the
//     doorbell, and an exclusive acquire starts on it
//     (lockmap.AcquireAsync). With memory nodes across the network its
//     reply is deferred, and the loop rings the doorbell once after every
//     pass, so that the atomics of all the commands of a pass share one
//     round trip to the memory node. An in-process memory node's doorbell
//     rings at once: the acquire is answered in place unless it queued
//     behind a holder, and then it waits for the handover on a goroutine,
//     its reply deferred;
//   - any other lock command that would have to wait (a shared or
//     multi-key acquire on a held key, a script's, a verb on a network
//     memory node that the doorbell does not carry) answers ErrWouldBlock:
//     its reply is dropped and it runs again from the start on a
//     goroutine, on a state of its own, where it may wait.
//
// A connection never waits behind itself (replyq.go): while one of its
// commands waits, deferred or on its goroutine, the loop goes on with the
// commands behind it, and holds their replies until the ones ahead of them
// are out. When the waiting command is done it wakes the loop, which
// writes what may go out now.

// loopIO is what the loop needs of a connection: gnet.Conn's view of the
// buffered input, and its write.
type loopIO interface {
	// Peek(n) returns the first n buffered input bytes (n <= 0: all of
	// them), valid until Discard. gnet copies them when its buffer
	// wraps, so the loop peeks a window, not all its input (peekWindow).
	Peek(n int) ([]byte, error)
	// InboundBuffered is how many input bytes are buffered.
	InboundBuffered() int
	// Discard drops n > 0 bytes from the front of the input.
	Discard(n int) (int, error)
	Write(p []byte) (int, error)
	// OutboundBuffered is how many written bytes wait for the socket.
	OutboundBuffered() int
}

// loopConn is one connection of the event loop.
type loopConn struct {
	st   *connState    // the loop's state: every command runs on it first
	loop *lockmap.Loop // the lock map as lock commands on the loop use it
	g    *wire.Guard
	seen int // bytes at the front of the buffered input the guard has checked
	// window is how many input bytes the next pass peeks (peekWindow,
	// more while the command at the front is longer).
	window int
	p      cmdParser
	wake   func() // has the loop call onTraffic again (gnet: Conn.Wake)
	bell   *loopBell
	// io is the connection as the loop writes to it, for serveWoken; nil
	// until the front end sets it. gone: closed (closeLoopConn). woken:
	// in bell.woken (guarded by bell.wmu).
	io    loopIO
	gone  bool
	woken bool

	// q holds the commands still running and the replies behind them; it
	// is the loop's alone. Commands that finish set their entry's fin and
	// wake the loop.
	q replyQueue
	// staged: the current batch started atomics on a network doorbell:
	// its replies go out only once those are posted and answered (a
	// client told "released" must not find the key still held), through
	// a barrier entry the doorbell opens.
	staged bool
	// next is the entry a deferred acquire of the next lock command gets:
	// the command's completion and Queue hook report to it.
	next *pending
	// closing: close once every reply is out (QUIT).
	closing bool
	// bad is the error a batch ended on (actFatal).
	bad string
	// staging are the keys of the commands of the current batch that
	// staged atomics on the network doorbell (slices of its input): a later
	// command on one of them waits for the next pass, once they are in.
	staging [][]byte
	// spare are states of finished goroutines, for the next command that
	// has to wait.
	spare []*connState
	// paused: the client does not read its replies as fast as it sends
	// commands (pauseAt); a timer wakes the loop to look again.
	paused atomic.Bool
}

// pauseAt is how many bytes of replies may wait for a connection's socket
// before the loop stops running its input until the socket drains. Without
// it a client that pipelines cheap commands with long replies (a megabyte
// of unknown commands is 50 MB of errors) and reads late makes the proxy
// hold up to MaxOutputBytes of replies, and the Go heap as much again,
// where its unread input is 50 times smaller.
const pauseAt = 1 << 20

// peekWindow is how much of a connection's buffered input a pass looks at
// first. Input piles up while the connection is paused (a client that
// pipelines and does not read) or waits behind its own commands, up to
// MaxOutputBytes; a pass that peeked all of it had gnet copy it whole, on
// every pass of 64 KiB of replies: a client flooding PINGs had the loop
// copy gigabytes a second, the other clients of the loop waited 100 times
// longer, and the heap held 200 MB for one connection.
const peekWindow = 64 << 10

// pausePoll is how often a paused connection looks whether its socket has
// drained: gnet reports no writable event to its handler.
const pausePoll = time.Millisecond

// maxPending bounds the commands of one connection left running at once;
// past it the loop runs no more of its input until some are done, and
// the input it has buffered meanwhile counts against MaxOutputBytes, not
// MaxCommandBytes: on a memory node across the network every lock command
// waits a round trip, so a big batch of them fills maxPending at once.
var maxPending = 1024 // a variable for tests

// busy reports whether a command of the connection is still running.
func (lc *loopConn) busy() bool { return !lc.q.empty() }

// loopBell is an event loop's doorbell (lockmap.Doorbell): the atomics the
// lock commands of one pass start go out together, with one round trip
// per memory node, when the loop rings it after the pass. The loop waits
// only so long for the memory node (ringPatience): then it serves its other
// connections, and the answer comes back to it as a task. In-process
// memory nodes cost no round trip, so their doorbell rings at once.
type loopBell struct {
	d         *lockmap.Doorbell
	inline    bool
	scheduled bool
	// schedule runs f on the loop once the events of the current pass are
	// handled (gnet: EventLoop.Execute). Any goroutine may call it.
	schedule func(f func())
	counted  bool // a batch in flight is counted in offLoop

	// woken are the loop's connections that an acquire's grant woke
	// (wakeConn). While the loop runs a callback (busy), they are served
	// by the loop before it goes on, without Conn.Wake: no eventfd write,
	// no extra trip through epoll, and a grant that a release on this
	// loop made goes out before the release's own reply.
	wmu    sync.Mutex
	woken  []*loopConn
	spareW []*loopConn
	anyW   atomic.Bool // woken is not empty: set and cleared under wmu
	busy   atomic.Bool
}

// wakeConn has lc's loop answer what a grant completed. Any goroutine.
func (b *loopBell) wakeConn(lc *loopConn) {
	b.wmu.Lock()
	if !lc.woken {
		lc.woken = true
		b.woken = append(b.woken, lc)
		b.anyW.Store(true)
	}
	b.wmu.Unlock()
	// The loop clears busy before it looks at woken a last time: either
	// it sees lc there, or this sees busy clear and wakes the connection.
	if !b.busy.Load() {
		lc.wake()
	}
}

// serveWoken answers, on the loop, what grants completed for the
// connections in b.woken. skip, the connection whose batch is running, is
// answered by its own pass. A connection with input to run, or anything
// else to do than write, is woken the usual way.
func (s *Server) serveWoken(b *loopBell, skip *loopConn) {
	if !b.anyW.Load() {
		return
	}
	b.wmu.Lock()
	ws := b.woken
	b.woken = b.spareW[:0]
	b.anyW.Store(false)
	for _, lc := range ws {
		lc.woken = false
	}
	b.wmu.Unlock()
	kept := false
	for i, lc := range ws {
		ws[i] = nil
		switch {
		case lc.gone:
		case lc == skip:
			kept = true // for the loop's look after the callback
		case lc.io == nil || lc.closing || lc.paused.Load() || lc.st.killed.Load():
			lc.wake()
		default:
			if lc.io.InboundBuffered() > 0 {
				lc.wake()
				continue
			}
			lc.st.loopWaits.run()
			if !lc.q.empty() {
				s.flush(lc, lc.io)
			}
		}
	}
	b.wmu.Lock()
	b.spareW = ws[:0]
	if kept && !skip.woken {
		skip.woken = true
		b.woken = append(b.woken, skip)
		b.anyW.Store(true)
	}
	b.wmu.Unlock()
}

func (s *Server) newLoopBell(schedule func(func())) *loopBell {
	b := &loopBell{d: s.cfg.Map.NewDoorbell(), inline: s.cfg.Map.Inline()}
	b.d.Go = s.waiters.run // an acquire that has to wait waits on a kept goroutine
	// A late answer comes back through schedule: count it out once it is in.
	b.schedule = func(f func()) { schedule(func() { f(); b.track() }) }
	return b
}

// track keeps offLoop counting this doorbell while a batch it launched is
// unanswered: the answer needs the fabric's readers to run. On the loop.
func (b *loopBell) track() {
	if in := b.d.InFlight(); in != b.counted {
		b.counted = in
		if in {
			offLoop.Add(1)
		} else {
			offLoop.Add(-1)
		}
	}
}

// after is called by the loop after a connection's batch: anything started
// goes out now (in-process) or once the pass is over (network).
func (b *loopBell) after() {
	if !b.d.Pending() || b.scheduled {
		return
	}
	if b.inline {
		b.d.Ring(context.Background())
		return
	}
	b.scheduled = true
	b.schedule(b.ring)
}

// ringPatience is how long the loop waits for the memory nodes' answers
// after a ring before it goes back to its other connections (and takes
// the answers when they come). Waiting is cheaper, as long as it lasts a
// round trip: the requests of that time are then read in one pass and go
// out in one batch. The bound is what a memory node that stops answering
// costs the loop's other clients, once.
const ringPatience = 2 * time.Millisecond

func (b *loopBell) ring() {
	b.scheduled = false
	b.d.Launch(context.Background(), ringPatience, b.schedule)
	b.track()
}

// action is what a batch leaves to do.
type action uint8

const (
	actNone   action = iota
	actFull          // maxPending commands are running: read no more until some are done
	actSettle        // the next command waits for an earlier one on its keys to settle
	actClose         // write the replies, then close the connection
	actFatal         // bad input: answer it and close at once
	actMore          // the replies fill a write: write them, then run the rest
)

// flushAt is how many bytes of replies a batch collects before it writes
// them and goes on: a pipeline of commands with long replies (INFO,
// COMMAND) would otherwise hold thousands of times its own size in replies
// until its last command ran. Past the socket, MaxOutputBytes bounds them.
const flushAt = 64 << 10

// makeLoopConn is a connection's state on the loop, not yet counted.
func (s *Server) makeLoopConn(wake func(), bell *loopBell) *loopConn {
	ctx, cancel := context.WithCancel(context.Background())
	lc := &loopConn{
		st:   s.newConnState(ctx, cancel),
		loop: s.cfg.Map.Loop(bell.d),
		g:    s.newGuard(),
		wake: wake,
		bell: bell,
	}
	lc.st.loopWaits = &loopWaits{wake: func() { bell.wakeConn(lc) }}
	return lc
}

// newLoopConn is a connection's state on the loop, counted as a client
// (tests; the front end counts at accept).
func (s *Server) newLoopConn(wake func(), bell *loopBell) *loopConn {
	s.clients.Add(1)
	return s.makeLoopConn(wake, bell)
}

// closeLoopConn is told that the connection has closed. Its commands still
// running see its context cancelled: a wait in a lock's queue ends, and the
// lock table completes and releases the acquisition in the background
// rather than keep a lock nobody will release for its whole TTL.
func (s *Server) closeLoopConn(lc *loopConn) {
	lc.gone = true
	lc.st.cancel()
	lc.st.loopWaits.close()
	s.unregister(lc.st.conn)
	s.clients.Add(-1)
}

// onTraffic runs when the connection's input grew or one of its commands
// finished. It reports whether to close the connection.
func (s *Server) onTraffic(lc *loopConn, io loopIO) bool {
	if lc.st.killed.Load() {
		return true
	}
	lc.st.loopWaits.run()
	if !lc.q.empty() {
		s.flush(lc, io)
	}
	if lc.closing {
		// Nothing more is read; what a client sends meanwhile waits in
		// the input buffer, within the output limit.
		return lc.q.empty() || s.overOutput(lc, io.OutboundBuffered()+io.InboundBuffered()+lc.q.held)
	}
	for {
		if io.OutboundBuffered() > pauseAt {
			return s.pause(lc, io)
		}
		closing, more := s.pass(lc, io)
		if !more {
			return closing
		}
	}
}

// pause leaves the connection's input where it is until its replies have
// gone out. The input it buffers meanwhile counts against MaxOutputBytes
// with the replies: a client that never reads is closed, as the limit says.
func (s *Server) pause(lc *loopConn, io loopIO) (closing bool) {
	if s.overOutput(lc, io.OutboundBuffered()+io.InboundBuffered()+lc.q.held) {
		return true
	}
	if lc.paused.CompareAndSwap(false, true) {
		time.AfterFunc(pausePoll, func() {
			lc.paused.Store(false)
			lc.wake()
		})
	}
	return false
}

// pass runs what the connection's buffered input holds, as onTraffic
// describes; more is set when it stopped to write a full batch of replies
// and there is input left to run.
func (s *Server) pass(lc *loopConn, io loopIO) (closing, more bool) {
	buffered := io.InboundBuffered()
	if lc.window == 0 {
		lc.window = peekWindow
	}
	in, _ := io.Peek(min(buffered, lc.window))
	if err := lc.feed(in); err != nil {
		return s.fatal(lc, io, "ERR "+err.Error()), false
	}
	lc.bell.d.Mark() // the barrier waits for this connection's atomics only
	first := lc.q.len()
	n, act := s.batch(lc, in)
	lc.p.trim()
	if n > 0 {
		_, _ = io.Discard(n)
		lc.seen -= n
	}
	if act == actNone && len(in) < buffered {
		// The batch ran what the window holds, and the input goes on.
		// With no whole command in it, the window grows, up to the
		// longest command there can be; past that the rest is too long.
		// It shrinks again once commands take less than half of it.
		if n > 0 {
			if n < lc.window/2 {
				lc.window = max(lc.window/2, peekWindow)
			}
			act = actMore
		} else if lc.window <= s.cfg.MaxCommandBytes {
			lc.window = min(2*lc.window, s.cfg.MaxCommandBytes+1)
			act = actMore
		}
	}
	if act == actMore {
		more, act = true, actNone
	} else if act != actClose && act != actFatal {
		switch rest := buffered - n; {
		case act == actFull || act == actSettle:
			// A pipeline behind commands still running (a lock's queue,
			// a memory node's round trip, a lease confirmation) waits in
			// memory with the replies held behind them: the same limit
			// as replies a client does not read.
			if rest+lc.q.held > s.cfg.MaxOutputBytes {
				s.cutOff(lc, io, s.pipelineLimit())
				return true, false
			}
		case rest > s.cfg.MaxCommandBytes:
			// One incomplete command.
			lc.bad, act = fmt.Sprintf("ERR command exceeds %d bytes, the proxy's limit", s.cfg.MaxCommandBytes), actFatal
		}
	}
	if act == actFatal {
		return s.fatal(lc, io, lc.bad), false
	}
	if lc.staged {
		lc.staged = false
		if !lc.bell.inline {
			s.barrier(lc, first)
		}
	}
	clear(lc.staging)
	lc.staging = lc.staging[:0]
	s.flush(lc, io)
	lc.bell.after()
	if s.overOutput(lc, io.OutboundBuffered()+lc.q.held) {
		return true, false
	}
	if act == actClose {
		if lc.q.empty() {
			return true, false
		}
		lc.closing = true // once the replies of the commands still running are out
	}
	return false, more
}

// overOutput reports whether n bytes waiting for a client are over
// MaxOutputBytes, and logs that the client is closed for it. A client that
// pipelines and does not read its replies would pile them up in the proxy
// without bound; Redis's client-output-buffer-limit does the same for the
// clients it caps.
func (s *Server) overOutput(lc *loopConn, n int) bool {
	if n <= s.cfg.MaxOutputBytes {
		return false
	}
	s.log.Warn("closing a client over the output limit: it does not read its replies",
		zap.Int64("id", lc.st.id), zap.String("addr", lc.st.addr), zap.Int("pending_bytes", n), zap.Int("limit", s.cfg.MaxOutputBytes))
	return true
}

// barrier holds the replies of the pass that started atomics on the network
// doorbell, the entries it queued from first on and the replies after them,
// until the memory nodes have answered those atomics: a client told
// "released" must not find the key still held. The doorbell opens it.
func (s *Server) barrier(lc *loopConn, first int) {
	b := &pending{}
	b.gate = b // its replies wait for itself
	// Until the atomics are in, a later command on their keys waits: a
	// read would find the entry still as it was.
	for _, k := range lc.staging {
		b.keys = append(b.keys, string(k))
	}
	for _, p := range lc.q.q[first:] {
		if p.gate == nil {
			p.gate = b
		}
	}
	lc.q.push(b, &lc.st.w)
	lc.bell.d.After(func() {
		b.fin.Store(true)
		lc.wake()
	})
}

func (s *Server) pipelineLimit() string {
	return fmt.Sprintf("ERR more than %d bytes of commands and replies wait behind commands still running, the proxy's limit (max_output_bytes)", s.cfg.MaxOutputBytes)
}

// fatal answers bad input with msg and reports whether to close the
// connection now. Redis answers every command it ran before the bad input,
// then the error, then closes; so does the proxy, with the commands still
// running too (a queued acquire): as after QUIT, the connection reads
// nothing more and closes once their replies and the error are out
// (closing). Before, their replies, and those held ahead of them, were
// dropped, and a client told nothing about a lock it had been granted.
// Input that arrives meanwhile counts against MaxOutputBytes (onTraffic).
func (s *Server) fatal(lc *loopConn, io loopIO, msg string) (closeNow bool) {
	lc.st.w.err(msg)
	s.flush(lc, io)
	if lc.q.empty() {
		return true
	}
	lc.closing = true
	return false
}

// cutOff answers a client over the output limit with msg and has the
// connection closed at once: the error goes out ahead of the replies of the
// commands still running, which are abandoned with the connection (its
// context is cancelled as it closes), and so are the replies held behind
// them. Waiting for them would let the client pile up more.
func (s *Server) cutOff(lc *loopConn, io loopIO, msg string) {
	w := &lc.st.w
	w.b = w.b[:0]
	lc.q = replyQueue{}
	w.err(msg)
	s.flush(lc, io)
}

// feed hands the guard the input bytes it has not seen yet.
func (lc *loopConn) feed(in []byte) error {
	if len(in) <= lc.seen {
		return nil
	}
	err := lc.g.Feed(in[lc.seen:])
	lc.seen = len(in)
	return err
}

// batch runs the complete commands at the front of in, in order, appending
// their replies to st.w. A command that has to wait is left running and
// the batch goes on. It stops at the end of the complete commands, at one
// after which the connection closes, or with maxPending commands running.
// It returns how many bytes it consumed.
func (s *Server) batch(lc *loopConn, in []byte) (int, action) {
	st := lc.st
	// Activity, for the idle timeout, is stamped once per batch, to the
	// server clock's tick: a batch runs in microseconds, and idle times
	// count seconds.
	st.active.Store(s.clock.Load())
	n := 0
	for n < len(in) {
		if len(st.w.b) >= flushAt {
			return n, actMore
		}
		if lc.q.len() >= maxPending {
			return n, actFull
		}
		args, used, err := lc.p.next(in[n:])
		if err != nil {
			lc.bad = "ERR " + err.Error()
			return n, actFatal
		}
		if used == 0 {
			break // incomplete
		}
		if len(args) == 0 {
			n += used
			continue // a blank inline line, or an empty multibulk
		}
		if !lc.q.empty() || len(lc.staging) > 0 {
			if c := st.lookup(args[0]); c != nil && c.lock && len(args) >= c.minArgs && lc.settling(c, args) {
				return n, actSettle // an earlier command on its keys is in flight
			}
		}
		n += used
		st.w.resp3 = st.resp3
		c, name := s.prepare(st, args)
		if st.attack {
			// Nothing of the batch is answered, and nothing after runs;
			// the commands still running answer nobody.
			st.w.b = st.w.b[:0]
			lc.q = replyQueue{}
			return n, actClose
		}
		switch {
		case c == nil:
			// answered by prepare
		case !c.lock:
			s.run(st, c, args)
		default:
			mark, ops := len(st.w.b), lc.bell.d.Len()
			st.loop, st.blocked, st.bell, st.inline = lc.loop, false, lc.bell.d, lc.bell.inline
			st.deferTo(&lc.next, lc.wake)
			s.run(st, c, args)
			st.loop, st.bell, st.done, st.pend, st.queueHook = nil, nil, nil, nil, st.conn.queueHook
			if lc.bell.inline {
				lc.bell.after() // in-process: post at once, so the next command sees it
			} else if lc.bell.d.Len() > ops {
				lc.staged = true
				first, last, step := keySpan(c, args)
				for i := first; i <= last; i += step {
					lc.staging = append(lc.staging, args[i])
				}
			}
			if st.blocked {
				st.blocked = false
				st.w.b = st.w.b[:mark]
				s.runOffloaded(lc, c, args)
			} else if st.deferred {
				lc.q.push(st.takeDeferred(&lc.next, c, args), &st.w)
			}
			// A release among its effects may have handed a lock to an
			// acquire of this connection: the commands behind see it held.
			// One of another connection of the loop is answered now,
			// ahead of this batch's replies.
			st.loopWaits.run()
			s.serveWoken(lc.bell, lc)
		}
		s.onCommand(name)
		if c != nil && c.name == "quit" {
			return n, actClose
		}
	}
	return n, actNone
}

// settling reports whether command c must wait for an earlier one of the
// connection on one of its keys: in flight, or an atomic staged by this
// batch.
func (lc *loopConn) settling(c *command, args [][]byte) bool {
	if db := lc.st.db.Load(); db != 0 {
		// As prepare will name them, and the commands in flight are.
		args = slices.Clone(args)
		nameKeys(c, args, db)
	}
	if lc.q.settling(c, args) {
		return true
	}
	first, last, step := keySpan(c, args)
	for i := first; i <= last; i += step {
		for _, sk := range lc.staging {
			if string(sk) == string(args[i]) {
				return true
			}
		}
	}
	return false
}

// runOffloaded runs a command that has to wait on a goroutine, on a state of
// its own, with its arguments copied out of the input buffer, which the
// loop reuses meanwhile. The connection goes on with the commands behind
// it; the command's entry in the queue holds their replies until its own
// is in.
func (s *Server) runOffloaded(lc *loopConn, c *command, args [][]byte) {
	p, args := waiting(lc.st, lc.state(), c, args, lc.wake)
	lc.q.push(p, &lc.st.w)
	s.goWait(p, c, args, lc.wake)
}

// state is a state for a command that has to wait: a spare one, or new.
func (lc *loopConn) state() *connState {
	if n := len(lc.spare); n > 0 {
		x := lc.spare[n-1]
		lc.spare = lc.spare[:n-1]
		return x
	}
	return lc.st.newState()
}

// recycle keeps a finished goroutine's state for the next one, with its
// buffers if they are small.
func (lc *loopConn) recycle(x *connState) {
	if len(lc.spare) >= 4 {
		return
	}
	if cap(x.w.b) > maxKept {
		x.w.b = nil
	}
	x.w.b = x.w.b[:0]
	x.arena, x.args = x.arena[:0], x.args[:0]
	if cap(x.arena) > maxKept {
		x.arena, x.args = nil, nil
	}
	lc.spare = append(lc.spare, x)
}

// maxKept bounds the buffers a connection keeps between batches.
const maxKept = 64 << 10

// flush writes the replies that may go out: everything gathered, if no
// command is running, else what the queue gives, in order, with one write.
func (s *Server) flush(lc *loopConn, io loopIO) {
	w := &lc.st.w
	lc.q.out(w, lc.recycle)
	if len(w.b) == 0 {
		return
	}
	_, _ = io.Write(w.b)
	if cap(w.b) > maxKept {
		w.b = nil
	} else {
		w.b = w.b[:0]
	}
}
