package resp

import (
	"context"
	"fmt"
	"go.uber.org/zap"
	"sync/atomic"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
)

// The event loop's batch logic, apart from gnet (gnet.go) so that tests and
// the fuzz target can drive it without sockets.
//
// Each time a connection's input grows, the loop runs every complete
// command buffered for it, in order, appends all their replies to one
// buffer and writes that with one system call. A command must never block
// the loop, which serves every other connection too:
//
//   - commands that do not touch the lock table run on the loop;
//   - lock commands run on the loop too, under lockmap.NoWait, with the
//     loop's doorbell (loopBell): a release posts its atomic on the
//     doorbell; with memory nodes across the network, an exclusive acquire
//     starts on the doorbell and defers its reply, and the loop rings the
//     doorbell once after every pass, so that the atomics of all the
//     commands of a pass share one round trip to the memory node;
//   - a lock command that would have to wait answers ErrWouldBlock (a held
//     key with a wait budget on an in-process memory node, a verb on a
//     network one that the doorbell does not carry): its reply is dropped
//     and it runs again from the start on a goroutine, where it may wait.
//
// While a connection's command is deferred or runs on a goroutine, the
// connection processes nothing else, so replies stay in order: input that
// arrives meanwhile stays buffered, up to MaxCommandBytes. When the
// command is done it wakes the loop, which writes its reply and carries on
// with the buffered input in the same pass.

// loopIO is what the loop needs of a connection: gnet.Conn's view of the
// buffered input, and its write.
type loopIO interface {
	// Peek(-1) returns every buffered input byte, valid until Discard.
	Peek(n int) ([]byte, error)
	// Discard drops n > 0 bytes from the front of the input.
	Discard(n int) (int, error)
	Write(p []byte) (int, error)
	// OutboundBuffered is how many written bytes wait for the socket.
	OutboundBuffered() int
}

// loopConn is one connection of the event loop.
type loopConn struct {
	st     *connState
	base   context.Context // the connection's context, cancelled when it closes
	nowait context.Context // base under lockmap.NoWait, for lock commands on the loop
	g      *guard
	seen   int // bytes at the front of the buffered input the guard has checked
	p      cmdParser
	wake   func() // has the loop call onTraffic again (gnet: Conn.Wake)
	bell   *loopBell

	// busy: held runs on a goroutine, which owns st until it sets finished,
	// or a deferred command waits for its acquire, whose completion hands
	// over the reply (ready) and sets finished. busy and held are only
	// touched by the loop (and by the goroutine between the loop starting
	// it and finished).
	busy     bool
	held     heldCmd
	ready    atomic.Pointer[func(*replyWriter)]
	finished atomic.Bool
	// staged: the current batch started atomics on a network doorbell.
	// Until they are posted and answered, nothing of the connection goes
	// further: not its replies (a client told "released" must not find the
	// key still held), and not its next command. unposted is set while a
	// deferred command's connection waits for that, and closing when the
	// connection closes once it is over.
	staged   bool
	unposted bool
	closing  bool
}

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
}

func (s *Server) newLoopBell(schedule func(func())) *loopBell {
	return &loopBell{d: s.cfg.Map.NewDoorbell(), inline: s.cfg.Map.Inline(), schedule: schedule}
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
}

// heldCmd is a command handed to a goroutine, with its arguments copied
// out of the input buffer, which the loop may reuse meanwhile.
type heldCmd struct {
	c     *command
	args  [][]byte
	arena []byte
}

// action is what a batch leaves to do.
type action uint8

const (
	actNone  action = iota
	actHold         // run lc.held on a goroutine
	actDefer        // the last command's reply comes from its completion
	actClose        // write the replies, then close the connection
	actMore         // the replies fill a write: write them, then run the rest
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
		st:     s.newConnState(ctx, cancel),
		base:   ctx,
		nowait: lockmap.WithDoorbell(lockmap.NoWait(ctx), bell.d),
		g:      s.newGuard(),
		wake:   wake,
		bell:   bell,
	}
	lc.st.done = func(render func(*replyWriter)) {
		lc.ready.Store(&render)
		lc.finished.Store(true)
		lc.wake()
	}
	return lc
}

// newLoopConn is a connection's state on the loop, counted as a client
// (tests; the front end counts at accept).
func (s *Server) newLoopConn(wake func(), bell *loopBell) *loopConn {
	s.clients.Add(1)
	return s.makeLoopConn(wake, bell)
}

// closeLoopConn is told that the connection has closed. A command of its
// still running on a goroutine sees its context cancelled: a wait in a
// lock's queue ends, and the lock table completes and releases the
// acquisition in the background rather than keep a lock nobody will
// release for its whole TTL.
func (s *Server) closeLoopConn(lc *loopConn) {
	lc.st.cancel()
	s.unregister(lc.st.conn)
	s.clients.Add(-1)
}

// onTraffic runs when the connection's input grew or its goroutine
// finished. It reports whether to close the connection.
func (s *Server) onTraffic(lc *loopConn, io loopIO) bool {
	st := lc.st
	if st.killed.Load() {
		return true
	}
	if lc.busy {
		if !lc.finished.Load() || lc.unposted {
			return s.whileBusy(lc, io)
		}
		// The goroutine's reply is in st.w, ahead of what follows; a
		// deferred command's is rendered now.
		lc.busy = false
		lc.finished.Store(false)
		if r := lc.ready.Swap(nil); r != nil {
			st.w.resp3 = st.resp3
			(*r)(&st.w)
		}
		if lc.closing {
			s.flush(lc, io)
			return true
		}
	}
	for {
		closing, more := s.pass(lc, io)
		if !more {
			return closing
		}
	}
}

// pass runs what the connection's buffered input holds, as onTraffic
// describes; more is set when it stopped to write a full batch of replies
// and there is input left to run.
func (s *Server) pass(lc *loopConn, io loopIO) (closing, more bool) {
	st := lc.st
	in, _ := io.Peek(-1)
	if err := lc.feed(in); err != nil {
		st.w.err("ERR " + err.Error())
		s.flush(lc, io)
		return true, false
	}
	lc.bell.d.Mark() // afterRing waits for this connection's atomics only
	n, act := s.batch(lc, in)
	lc.p.trim()
	if n > 0 {
		_, _ = io.Discard(n)
		lc.seen -= n
	}
	if act == actMore {
		more, act = true, actNone
	} else if rest := len(in) - n; rest > s.cfg.MaxCommandBytes && act != actClose {
		// Without a command held, what is left is one incomplete command.
		if act == actHold {
			st.w.err(s.pipelineLimit())
		} else {
			st.w.err(fmt.Sprintf("ERR command exceeds %d bytes, the proxy's limit", s.cfg.MaxCommandBytes))
		}
		act = actClose
	}
	if lc.staged {
		lc.staged = false
		if !lc.bell.inline {
			// The rest of the input, if any, runs once the atomics are
			// answered and the loop is woken.
			s.afterRing(lc, act)
			return false, false
		}
	}
	s.flush(lc, io)
	lc.bell.after()
	if n := io.OutboundBuffered(); n > s.cfg.MaxOutputBytes {
		// A client that pipelines and does not read its replies: they
		// would pile up in the proxy without bound. Redis's
		// client-output-buffer-limit does the same for the clients it caps.
		s.log.Warn("closing a client over the output limit: it does not read its replies",
			zap.Int64("id", lc.st.id), zap.String("addr", lc.st.addr), zap.Int("pending_bytes", n), zap.Int("limit", s.cfg.MaxOutputBytes))
		return true, false
	}
	switch act {
	case actClose:
		return true, false
	case actHold:
		lc.busy = true
		s.offload.Add(1)
		go s.runHeld(lc)
	case actDefer:
		// The completion may have run already (an acquire settled without
		// the memory node, or on a quick goroutine): its wake then brings
		// the loop straight back.
		lc.busy = true
	}
	return false, more
}

// afterRing holds a connection whose batch started atomics on the network
// doorbell until the memory nodes have answered them: the replies stay in
// st.w, and the connection is busy, so that what it does next (a command
// handed to a goroutine, the buffered input, closing) comes after the
// atomics too.
func (s *Server) afterRing(lc *loopConn, act action) {
	lc.busy = true
	switch act {
	case actNone, actClose:
		lc.closing = act == actClose
		lc.bell.d.After(func() {
			lc.finished.Store(true)
			lc.wake()
		})
	case actHold:
		lc.bell.d.After(func() {
			s.offload.Add(1)
			go s.runHeld(lc)
		})
	case actDefer:
		// Its own completion hands over the last reply; the others wait
		// for the atomics of the earlier commands, which may have gone to
		// other memory nodes.
		lc.unposted = true
		lc.bell.d.After(func() {
			lc.unposted = false
			lc.wake()
		})
	}
	lc.bell.after()
}

func (s *Server) pipelineLimit() string {
	return fmt.Sprintf("ERR more than %d bytes of commands are pipelined behind one still waiting for its lock, the proxy's limit", s.cfg.MaxCommandBytes)
}

// whileBusy keeps a connection's new input buffered while its goroutine
// runs. The guard still checks every byte as it arrives, and the input may
// not grow past MaxCommandBytes: a client that keeps pipelining behind a
// waiting command is told so and disconnected, which also abandons the
// wait. The reply goes straight out, since st.w belongs to the goroutine.
func (s *Server) whileBusy(lc *loopConn, io loopIO) bool {
	in, _ := io.Peek(-1)
	msg := ""
	if err := lc.feed(in); err != nil {
		msg = "ERR " + err.Error()
	} else if len(in) > s.cfg.MaxCommandBytes {
		msg = s.pipelineLimit()
	} else {
		return false
	}
	var w replyWriter
	w.err(msg)
	_, _ = io.Write(w.b)
	return true
}

// feed hands the guard the input bytes it has not seen yet.
func (lc *loopConn) feed(in []byte) error {
	if len(in) <= lc.seen {
		return nil
	}
	err := lc.g.feed(in[lc.seen:])
	lc.seen = len(in)
	return err
}

// batch runs the complete commands at the front of in, in order, appending
// their replies to st.w. It stops at the end of the complete commands, at
// a command that must run on a goroutine (copied to lc.held), or at one
// after which the connection closes. It returns how many bytes it consumed.
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
		args, used, err := lc.p.next(in[n:])
		if err != nil {
			st.w.err("ERR " + err.Error())
			return n, actClose
		}
		if used == 0 {
			break // incomplete
		}
		n += used
		if len(args) == 0 {
			continue // a blank inline line, or an empty multibulk
		}
		st.w.resp3 = st.resp3
		c, name := s.prepare(st, args)
		if st.attack {
			// Nothing of the batch is answered, and nothing after runs.
			st.w.b = st.w.b[:0]
			return n, actClose
		}
		switch {
		case c == nil:
			// answered by prepare
		case !c.lock:
			s.run(st, c, args)
		default:
			mark, ops := len(st.w.b), lc.bell.d.Len()
			st.ctx, st.blocked, st.bell = lc.nowait, false, lc.bell.d
			s.run(st, c, args)
			st.ctx, st.bell = lc.base, nil
			if lc.bell.inline {
				lc.bell.after() // in-process: post at once, so the next command sees it
			} else if lc.bell.d.Len() > ops {
				lc.staged = true
			}
			if st.blocked {
				st.blocked = false
				st.w.b = st.w.b[:mark]
				lc.hold(c, args)
				return n, actHold
			}
			if st.deferred {
				st.deferred = false
				s.onCommand(name)
				return n, actDefer
			}
		}
		s.onCommand(name)
		if c != nil && c.name == "quit" {
			return n, actClose
		}
	}
	return n, actNone
}

// hold copies a command out of the input buffer for runHeld.
func (lc *loopConn) hold(c *command, args [][]byte) {
	h := &lc.held
	size := 0
	for _, a := range args {
		size += len(a)
	}
	if cap(h.arena) < size {
		h.arena = make([]byte, 0, size)
	}
	// The arena has room for every argument, so appending never moves it
	// and the slices below stay valid.
	arena := h.arena[:0]
	h.args = h.args[:0]
	for _, a := range args {
		off := len(arena)
		arena = append(arena, a...)
		h.args = append(h.args, arena[off:len(arena):len(arena)])
	}
	h.arena = arena
	h.c = c
}

// maxKept bounds the buffers a connection keeps between batches.
const maxKept = 64 << 10

// runHeld runs a held command on its own goroutine, where it may wait, and
// hands its reply to the loop.
func (s *Server) runHeld(lc *loopConn) {
	st, h := lc.st, &lc.held
	st.w.resp3 = st.resp3
	s.run(st, h.c, h.args)
	s.onCommand(h.c.name)
	if cap(h.arena) > maxKept {
		h.arena, h.args = nil, nil
	}
	lc.finished.Store(true)
	lc.wake()
}

// flush writes the batch's replies with one write.
func (s *Server) flush(lc *loopConn, io loopIO) {
	w := &lc.st.w
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
