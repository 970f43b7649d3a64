package resp

import (
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Both front ends accept connections here, on a goroutine per listening
// port, rather than in gnet's or redcon's accept loops: gnet's ended the
// engine, and so the process, when accept failed for want of a file
// descriptor, and redcon's retried at once, spinning a core (issue 32).
//
// A connection is admitted or refused before anything is read from it:
// past MaxClients it is told Redis's error and closed at once, on this
// goroutine, so that a flood of connections costs one descriptor at a time
// beyond the clients. TLS connections are handshaken first, on a goroutine
// each, under a deadline; they count as clients only from then on (see
// ListenTLS).

// acceptRetry bounds the wait after a failed accept: the kernel keeps the
// connection queued meanwhile, as it does for Redis, which logs the error
// and tries again on the next event.
const acceptRetry = time.Second

// acceptLoop accepts on ln until it is closed, handing each connection to
// admit. It never gives up on an error: out of descriptors (EMFILE,
// ENFILE) or kernel memory it logs, at most once a minute, and tries again
// after a pause that grows to acceptRetry.
func (s *Server) acceptLoop(ln net.Listener, admit func(net.Conn)) {
	var pause time.Duration
	for {
		nc, err := ln.Accept()
		if err == nil {
			pause = 0
			admit(nc)
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
		s.acceptFailed.Add(1)
		s.logAcceptError(err)
		pause = min(max(2*pause, 5*time.Millisecond), acceptRetry)
		time.Sleep(pause)
	}
}

// logAcceptError logs err unless an accept error was logged less than a
// minute ago: a descriptor shortage fails every accept until it ends.
func (s *Server) logAcceptError(err error) {
	now := time.Now().UnixNano()
	last := s.acceptLogged.Load()
	if now-last < int64(time.Minute) || !s.acceptLogged.CompareAndSwap(last, now) {
		return
	}
	s.log.Error("accepting a client connection failed; retrying (if the process is out of file descriptors, raise its limit, ulimit -n or LimitNOFILE, or lower maxclients)",
		zap.Error(err), zap.Int64("failures_so_far", s.acceptFailed.Load()), zap.Int64("clients", s.clients.Load()), zap.Int("maxclients", s.cfg.MaxClients))
}

// AcceptFailures counts accepts that failed (out of descriptors, mostly).
func (s *Server) AcceptFailures() int64 { return s.acceptFailed.Load() }

// HandshakesRefused counts TLS connections closed at MaxHandshakes.
func (s *Server) HandshakesRefused() int64 { return s.handshakesRefused.Load() }

// tcpOptions sets what every client socket gets: no Nagle delay, and the
// configured keep-alive.
func (s *Server) tcpOptions(nc net.Conn) {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.SetNoDelay(true)
	if d := s.cfg.KeepAlive; d > 0 {
		_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: d, Interval: d / 5, Count: 3})
	} else {
		_ = tc.SetKeepAlive(false)
	}
}

// refuse tells a connection past MaxClients (or during a drain) why, and
// closes it. The write cannot block for long: a new socket's send buffer
// is empty, and the deadline covers a TLS record too.
func (s *Server) refuse(nc net.Conn) {
	_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = nc.Write([]byte(s.refusal()))
	_ = nc.Close()
}

// TLS handshakes in flight are bounded, each by a deadline: a connection
// that never speaks costs a descriptor and a goroutine for
// HandshakeTimeout, and past MaxHandshakes new TLS connections are closed
// at once, so silent connections can neither block the accept loop nor
// take the clients' places.
const (
	// MaxHandshakes is the number of TLS handshakes that may be in flight.
	MaxHandshakes = 64
	// HandshakeTimeout bounds one TLS handshake.
	HandshakeTimeout = 10 * time.Second
)

// handshaker runs TLS handshakes off the accept loop.
type handshaker struct {
	s        *Server
	cfg      *tls.Config
	inFlight atomic.Int64
	// ready has a handshaken connection admitted (start).
	ready func(net.Conn)
}

// admit starts nc's handshake on a goroutine of its own, or closes nc if
// MaxHandshakes are in flight.
func (h *handshaker) admit(nc net.Conn) {
	if h.inFlight.Add(1) > MaxHandshakes {
		h.inFlight.Add(-1)
		h.s.handshakesRefused.Add(1)
		_ = nc.Close()
		return
	}
	h.s.tcpOptions(nc)
	go func() {
		defer h.inFlight.Add(-1)
		tc := tls.Server(nc, h.cfg)
		_ = tc.SetDeadline(time.Now().Add(HandshakeTimeout))
		if err := tc.Handshake(); err != nil {
			h.s.log.Debug("TLS handshake failed", zap.String("remote", addrString(nc.RemoteAddr())), zap.Error(err))
			_ = nc.Close()
			return
		}
		_ = tc.SetDeadline(time.Time{})
		h.ready(tc)
	}()
}

// ReservedFDs is how many file descriptors a Server with cfg uses besides
// one per client, at most: its listeners, gnet's pollers, the connections
// being handed to a loop, the one being refused, and with TLS the
// handshakes in flight. A process that sizes MaxClients to its descriptor
// limit adds this to what it needs itself.
func ReservedFDs(cfg Config, tls bool) int {
	cfg.defaults()
	n := 1 + 1 // the client port, a connection being refused
	if cfg.Frontend == FrontendGnet {
		// An epoll descriptor and an eventfd per loop and for the main
		// reactor, gnet's unused socket, and the duplicates of the
		// connections being enrolled.
		n += 2*(cfg.EventLoops+1) + 1 + maxEnrolling
	}
	if tls {
		n += 1 + MaxHandshakes
	}
	return n
}
