package resp

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

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
//   - lock commands run on the loop only if every memory node is in-process
//     (lockmap.Map.Inline), under lockmap.NoWait; if one answers
//     ErrWouldBlock (a held key with a wait budget), its reply is dropped
//     and it runs again from the start on a goroutine, where it may wait;
//   - with a memory node across the network, lock commands always run on a
//     goroutine, since each of their verbs is a round trip.
//
// While a connection's command runs on a goroutine, the connection
// processes nothing else, so replies stay in order: input that arrives
// meanwhile stays buffered, up to MaxCommandBytes. When the goroutine is
// done it wakes the loop, which writes its reply and carries on with the
// buffered input in the same pass.

// loopIO is what the loop needs of a connection: gnet.Conn's view of the
// buffered input, and its write.
type loopIO interface {
	// Peek(-1) returns every buffered input byte, valid until Discard.
	Peek(n int) ([]byte, error)
	// Discard drops n > 0 bytes from the front of the input.
	Discard(n int) (int, error)
	Write(p []byte) (int, error)
}

// loopConn is one connection of the event loop.
type loopConn struct {
	st     *connState
	base   context.Context // the connection's context, cancelled when it closes
	nowait context.Context // base under lockmap.NoWait, for lock commands on the loop
	g      *guard
	seen   int      // bytes at the front of the buffered input the guard has checked
	args   [][]byte // the parser's argument slice, reused
	line   []byte   // scratch for inline commands that start with '$'
	wake   func()   // has the loop call onTraffic again (gnet: Conn.Wake)

	// busy: held runs on a goroutine, which owns st until it sets finished.
	// busy and held are only touched by the loop (and by the goroutine
	// between the loop starting it and finished).
	busy     bool
	held     heldCmd
	finished atomic.Bool
}

// heldCmd is a command handed to a goroutine, with its arguments copied
// out of the input buffer, which the loop may reuse meanwhile.
type heldCmd struct {
	c     *command
	args  [][]byte
	arena []byte
	start time.Time
}

// action is what a batch leaves to do.
type action uint8

const (
	actNone  action = iota
	actHold         // run lc.held on a goroutine
	actClose        // write the replies, then close the connection
)

func (s *Server) newLoopConn(wake func()) *loopConn {
	ctx, cancel := context.WithCancel(context.Background())
	lc := &loopConn{
		st:     s.newConnState(ctx, cancel),
		base:   ctx,
		nowait: lockmap.NoWait(ctx),
		g:      newGuard(maxArgs, int64(s.cfg.MaxCommandBytes), s.cfg.MaxCommandBytes),
		wake:   wake,
	}
	s.clients.Add(1)
	return lc
}

// closeLoopConn is told that the connection has closed. A command of its
// still running on a goroutine sees its context cancelled: a wait in a
// lock's queue ends, and the lock table completes and releases the
// acquisition in the background rather than keep a lock nobody will
// release for its whole TTL.
func (s *Server) closeLoopConn(lc *loopConn) {
	lc.st.cancel()
	s.clients.Add(-1)
}

// onTraffic runs when the connection's input grew or its goroutine
// finished. It reports whether to close the connection.
func (s *Server) onTraffic(lc *loopConn, io loopIO) bool {
	if lc.busy {
		if !lc.finished.Load() {
			return s.whileBusy(lc, io)
		}
		// The goroutine's reply is in st.w, ahead of what follows.
		lc.busy = false
		lc.finished.Store(false)
	}
	st := lc.st
	in, _ := io.Peek(-1)
	if err := lc.feed(in); err != nil {
		st.w.err("ERR " + err.Error())
		s.flush(lc, io)
		return true
	}
	n, act := s.batch(lc, in)
	if n > 0 {
		_, _ = io.Discard(n)
		lc.seen -= n
	}
	if rest := len(in) - n; rest > s.cfg.MaxCommandBytes && act != actClose {
		// Without a command held, what is left is one incomplete command.
		if act == actHold {
			st.w.err(s.pipelineLimit())
		} else {
			st.w.err(fmt.Sprintf("ERR command exceeds %d bytes, the proxy's limit", s.cfg.MaxCommandBytes))
		}
		act = actClose
	}
	s.flush(lc, io)
	switch act {
	case actClose:
		return true
	case actHold:
		lc.busy = true
		s.offload.Add(1)
		go s.runHeld(lc)
	}
	return false
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
	n := 0
	for n < len(in) {
		args, used, err := lc.parse(in[n:])
		if err != nil {
			st.w.err("ERR " + err.Error())
			return n, actClose
		}
		if used == 0 {
			break // incomplete
		}
		n += used
		if len(args) == 0 {
			continue // a blank inline line
		}
		start := time.Now()
		st.w.resp3 = st.resp3
		c, name := s.prepare(st, args)
		switch {
		case c == nil:
			// answered by prepare
		case !c.lock:
			s.run(st, c, args)
		case !s.cfg.Map.Inline():
			lc.hold(c, args, start)
			return n, actHold
		default:
			mark := len(st.w.b)
			st.ctx, st.blocked = lc.nowait, false
			s.run(st, c, args)
			st.ctx = lc.base
			if st.blocked {
				st.blocked = false
				st.w.b = st.w.b[:mark]
				lc.hold(c, args, start)
				return n, actHold
			}
		}
		s.onCommand(name, start)
		if c != nil && c.name == "quit" {
			return n, actClose
		}
	}
	return n, actNone
}

// parse reads the command at the front of in: its arguments (valid until
// the input is discarded or the next parse) and its length, 0 if it is not
// complete yet. It is redcon's parser, which is the one the redcon front
// end uses, with the parser's argument slice reused.
func (lc *loopConn) parse(in []byte) ([][]byte, int, error) {
	if in[0] == '$' {
		// redcon.ReadNextCommand reads a line that starts with '$' as a
		// Tile38 command; redcon's server, like Redis, reads it as an inline
		// command. Parse a copy behind a space, which the inline parser skips.
		i := bytes.IndexByte(in, '\n')
		if i < 0 {
			return nil, 0, nil
		}
		lc.line = append(append(lc.line[:0], ' '), in[:i+1]...)
		_, args, _, _, err := redcon.ReadNextCommand(lc.line, lc.args[:0])
		if err != nil {
			return nil, 0, err
		}
		lc.args = args[:0]
		return args, i + 1, nil
	}
	complete, args, _, left, err := redcon.ReadNextCommand(in, lc.args[:0])
	if err != nil {
		return nil, 0, err
	}
	if !complete {
		return nil, 0, nil
	}
	lc.args = args[:0]
	return args, len(in) - len(left), nil
}

// hold copies a command out of the input buffer for runHeld.
func (lc *loopConn) hold(c *command, args [][]byte, start time.Time) {
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
	h.c, h.start = c, start
}

// maxKept bounds the buffers a connection keeps between batches.
const maxKept = 64 << 10

// runHeld runs a held command on its own goroutine, where it may wait, and
// hands its reply to the loop.
func (s *Server) runHeld(lc *loopConn) {
	st, h := lc.st, &lc.held
	st.w.resp3 = st.resp3
	s.run(st, h.c, h.args)
	s.onCommand(h.c.name, h.start)
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
