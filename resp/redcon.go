package resp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

// redconFrontend serves each connection on a goroutine of its own, which
// reads, runs each command (waiting in the lock if it must) and writes. It
// is kept next to the event loop so that both can be measured side by side
// (Config.Frontend), and it serves the TLS port. It is named after
// tidwall/redcon's server, which it ran on until issue 32: that server's
// reader parsed inline commands in memory quadratic in their words, its
// accept loop spun on a descriptor shortage and ran TLS handshakes inline.
// The reading is now this package's, with the event loop's guard and
// parser, and so is the accepting (accept.go).
type redconFrontend struct {
	s *Server
	// hs runs the handshakes of a TLS port (nil: plain TCP).
	hs *handshaker

	mu     sync.Mutex
	ln     net.Listener
	conns  map[*connState]net.Conn
	closed bool
	// wg counts the accept loop and every connection's goroutine.
	wg sync.WaitGroup
}

func newRedconFrontend(s *Server, cfg *tls.Config) *redconFrontend {
	f := &redconFrontend{s: s, conns: map[*connState]net.Conn{}}
	if cfg != nil {
		f.hs = &handshaker{s: s, cfg: cfg, ready: f.start}
	}
	return f
}

func (f *redconFrontend) listen(addr string) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	f.serve(ln)
	return ln.Addr(), nil
}

// serve accepts on ln in the background, TLS if the front end has a
// handshaker.
func (f *redconFrontend) serve(ln net.Listener) {
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	admit := f.start
	if f.hs != nil {
		admit = f.hs.admit
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.s.acceptLoop(ln, admit)
		f.s.stopped(nil)
	}()
}

// close stops accepting, closes every connection, cancels what their
// commands wait for, and waits until every connection's goroutine is done.
func (f *redconFrontend) close() error {
	f.mu.Lock()
	f.closed = true
	var err error
	if f.ln != nil {
		err = f.ln.Close()
	}
	for st, nc := range f.conns {
		st.cancel()
		_ = nc.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	return err
}

// start admits a connection (handshaken, on a TLS port): a client from now
// on, served by a goroutine of its own, or refused past MaxClients.
func (f *redconFrontend) start(nc net.Conn) {
	s := f.s
	if f.hs == nil {
		s.tcpOptions(nc)
	}
	if !s.reserveClient() {
		s.refuse(nc)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := s.newConnState(ctx, cancel)
	st.raw = nc
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		cancel()
		s.clients.Add(-1)
		_ = nc.Close()
		return
	}
	f.conns[st] = nc
	f.wg.Add(1)
	f.mu.Unlock()
	s.register(st.conn, addrString(nc.RemoteAddr()), addrString(nc.LocalAddr()), func() { _ = nc.Close() })
	go f.serveConn(nc, st)
}

// readChunk is the least room a read is given.
const readChunk = 16 << 10

// rconn is a connection of the redcon front end: its goroutine runs the
// commands in order, and a command that has to wait runs on a goroutine of
// its own while the connection goes on (replyq.go). Whoever has replies to
// give out, the connection's goroutine or a finished command's, writes
// them under mu.
type rconn struct {
	nc     net.Conn
	st     *connState
	loop   *lockmap.Loop // the lock map as a lock command's first run uses it
	inline bool          // the map's memory nodes are in-process
	// next is the entry a deferred acquire of the next lock command gets
	// (connState.acquireInline).
	next *pending

	mu     sync.Mutex
	q      replyQueue
	closed bool
	// settled is signalled when a command still running finishes or
	// queues, for a command that waits for an earlier one on its keys.
	settled chan struct{}
}

// wake is called when one of the connection's commands left running
// finished or queued: what may go out now goes out.
func (rc *rconn) wake() {
	rc.mu.Lock()
	if !rc.closed && !rc.q.empty() {
		if out := rc.q.drain(nil, nil); len(out) > 0 {
			_, _ = rc.nc.Write(out)
		}
	}
	rc.mu.Unlock()
	select {
	case rc.settled <- struct{}{}:
	default:
	}
}

// serveConn reads nc's input, runs its commands in order and writes their
// replies, until the connection ends.
func (f *redconFrontend) serveConn(nc net.Conn, st *connState) {
	s := f.s
	rc := &rconn{nc: nc, st: st, loop: s.cfg.Map.Loop(nil), inline: s.cfg.Map.Inline(), settled: make(chan struct{}, 1)}
	defer func() {
		rc.mu.Lock()
		rc.closed = true
		rc.mu.Unlock()
		st.cancel()
		s.unregister(st.conn)
		s.clients.Add(-1)
		_ = nc.Close()
		f.mu.Lock()
		delete(f.conns, st)
		f.mu.Unlock()
		f.wg.Done()
	}()
	g := s.newGuard()
	var p cmdParser
	// buf holds input not run yet: at most one incomplete command of up to
	// MaxCommandBytes, and one read more.
	buf := make([]byte, 0, 4<<10)
	for {
		if cap(buf)-len(buf) < readChunk {
			nb := make([]byte, len(buf), max(2*cap(buf), len(buf)+readChunk))
			copy(nb, buf)
			buf = nb
		}
		n, err := nc.Read(buf[len(buf):cap(buf)])
		if n > 0 {
			in := buf[len(buf) : len(buf)+n]
			buf = buf[:len(buf)+n]
			if gerr := g.Feed(in); gerr != nil {
				f.fatal(rc, "-ERR "+wire.OneLine(gerr.Error())+"\r\n")
				return
			}
			used, done := f.run(rc, &p, buf)
			p.trim()
			if done {
				return
			}
			buf = buf[:copy(buf, buf[used:])]
			if len(buf) > s.cfg.MaxCommandBytes {
				f.fatal(rc, fmt.Sprintf("-ERR command exceeds %d bytes, the proxy's limit\r\n", s.cfg.MaxCommandBytes))
				return
			}
			if len(buf) == 0 && cap(buf) > maxKept {
				buf = make([]byte, 0, 4<<10)
			}
		}
		if err != nil {
			if !isClosed(err) {
				s.log.Debug("connection closed", zap.String("remote", st.addr), zap.Error(err))
			}
			return
		}
	}
}

// run runs the complete commands at the front of in and writes their
// replies: how many bytes it consumed, and whether the connection is done.
// A lock command runs on a lockmap.Loop first; one that would wait runs
// on a goroutine of its own, and the next commands go on, but a command on
// the keys of an earlier one still in flight waits for it to settle.
func (f *redconFrontend) run(rc *rconn, p *cmdParser, in []byte) (int, bool) {
	s, st := f.s, rc.st
	n := 0
	defer func() { f.flush(rc) }()
	for n < len(in) {
		if st.killed.Load() {
			st.w.b = st.w.b[:0]
			return n, true
		}
		args, used, err := p.next(in[n:])
		if err != nil {
			f.fatal(rc, "-ERR "+wire.OneLine(err.Error())+"\r\n")
			return n, true
		}
		if used == 0 {
			break
		}
		n += used
		if len(args) == 0 {
			continue
		}
		st.active.Store(time.Now().UnixNano())
		st.w.resp3 = st.resp3
		c, name := s.prepare(st, args)
		if st.attack {
			// Nothing of the batch is answered, and nothing after runs.
			st.w.b = st.w.b[:0]
			return n, true
		}
		switch {
		case c == nil:
		case !c.lock:
			s.run(st, c, args)
		default:
			rc.settle(c, args)
			mark := len(st.w.b)
			st.loop, st.blocked, st.inline = rc.loop, false, rc.inline
			st.deferTo(&rc.next, rc.wake)
			s.run(st, c, args)
			st.loop, st.inline, st.done, st.pend, st.queueHook = nil, false, nil, nil, st.conn.queueHook
			if st.blocked {
				st.blocked = false
				st.w.b = st.w.b[:mark]
				f.offload(rc, c, args)
			} else if st.deferred {
				// An acquire queued in its lock: its reply comes when it is
				// handed the lock, and the replies behind it wait for it.
				p := st.takeDeferred(&rc.next, c, args)
				rc.mu.Lock()
				rc.q.push(p, &st.w)
				rc.mu.Unlock()
			}
		}
		s.onCommand(name)
		if name == "quit" {
			rc.drained()
			return n, true
		}
		if len(st.w.b) >= flushAt {
			f.flush(rc)
		}
	}
	return n, false
}

// settle waits until no command of the connection still in flight has one
// of c's keys in args.
func (rc *rconn) settle(c *command, args [][]byte) {
	for {
		rc.mu.Lock()
		busy := rc.q.settling(c, args)
		rc.mu.Unlock()
		if !busy {
			return
		}
		select {
		case <-rc.settled:
		case <-rc.st.base.Done():
			return
		}
	}
}

// drained waits until every command of the connection has finished and its
// reply is out (QUIT).
func (rc *rconn) drained() {
	for {
		rc.mu.Lock()
		rc.flushLocked()
		empty := rc.q.empty()
		rc.mu.Unlock()
		if empty {
			return
		}
		select {
		case <-rc.settled:
		case <-rc.st.base.Done():
			return
		}
	}
}

// offload runs a command that has to wait on a goroutine, on a state of
// its own, while the connection goes on.
func (f *redconFrontend) offload(rc *rconn, c *command, args [][]byte) {
	st := rc.st
	p, args := waiting(st, st.newState(), c, args, rc.wake)
	rc.mu.Lock()
	rc.q.push(p, &st.w)
	rc.mu.Unlock()
	f.s.goWait(p, c, args, rc.wake)
}

// flush writes the replies that may go out; a client that does not read
// them blocks whoever writes, and nothing piles up in the proxy.
func (f *redconFrontend) flush(rc *rconn) {
	rc.mu.Lock()
	rc.flushLocked()
	rc.mu.Unlock()
}

func (rc *rconn) flushLocked() {
	w := &rc.st.w
	rc.q.out(w, nil)
	if len(w.b) > 0 && !rc.closed {
		_, _ = rc.nc.Write(w.b)
	}
	if cap(w.b) > maxKept {
		w.b = nil
	} else {
		w.b = w.b[:0]
	}
}

// fatal answers bad input with msg, behind the replies of the commands
// still running (a queued acquire), and closes the connection once they are
// out, as the event loop does (Server.fatal). Nothing more is read
// meanwhile: this goroutine is the connection's reader.
func (f *redconFrontend) fatal(rc *rconn, msg string) {
	rc.mu.Lock()
	rc.st.w.b = append(rc.st.w.b, msg...)
	rc.mu.Unlock()
	rc.drained()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	_ = rc.nc.SetWriteDeadline(time.Now().Add(time.Second))
	rc.flushLocked()
	rc.closed = true
}

// isClosed reports the ordinary ends of a connection.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
}

// maxArgs bounds the arguments of one command; the largest lock command is a
// multi-key script, far below this.
const maxArgs = 1 << 16
