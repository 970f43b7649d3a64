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

// serveConn reads nc's input, runs its commands in order and writes their
// replies, until the connection ends.
func (f *redconFrontend) serveConn(nc net.Conn, st *connState) {
	s := f.s
	defer func() {
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
			if gerr := g.feed(in); gerr != nil {
				f.write(nc, st, "-ERR "+oneLine(gerr.Error())+"\r\n")
				return
			}
			used, done := f.run(nc, st, &p, buf)
			p.trim()
			if done {
				return
			}
			buf = buf[:copy(buf, buf[used:])]
			if len(buf) > s.cfg.MaxCommandBytes {
				f.write(nc, st, fmt.Sprintf("-ERR command exceeds %d bytes, the proxy's limit\r\n", s.cfg.MaxCommandBytes))
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
func (f *redconFrontend) run(nc net.Conn, st *connState, p *cmdParser, in []byte) (int, bool) {
	s := f.s
	n := 0
	defer func() {
		if len(st.w.b) > 0 {
			f.flush(nc, st)
		}
	}()
	for n < len(in) {
		if st.killed.Load() {
			st.w.b = st.w.b[:0]
			return n, true
		}
		args, used, err := p.next(in[n:])
		if err != nil {
			st.w.err("ERR " + err.Error())
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
		name := s.exec(st, args)
		if st.attack {
			// Nothing of the batch is answered, and nothing after runs.
			st.w.b = st.w.b[:0]
			return n, true
		}
		s.onCommand(name)
		if name == "quit" {
			return n, true
		}
		if len(st.w.b) >= flushAt {
			f.flush(nc, st)
		}
	}
	return n, false
}

// flush writes the replies collected in st.w; a client that does not read
// them blocks its own goroutine, and nothing piles up in the proxy.
func (f *redconFrontend) flush(nc net.Conn, st *connState) {
	_, _ = nc.Write(st.w.b)
	if cap(st.w.b) > maxKept {
		st.w.b = nil
	} else {
		st.w.b = st.w.b[:0]
	}
}

// write sends a last error before the connection closes.
func (f *redconFrontend) write(nc net.Conn, st *connState, msg string) {
	st.w.b = append(st.w.b, msg...)
	_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
	f.flush(nc, st)
}

// isClosed reports the ordinary ends of a connection.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
}

// maxArgs bounds the arguments of one command; the largest lock command is a
// multi-key script, far below this.
const maxArgs = 1 << 16
