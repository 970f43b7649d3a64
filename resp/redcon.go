package resp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/tidwall/redcon"
	"go.uber.org/zap"
)

// redconFrontend serves on tidwall/redcon: one goroutine per connection,
// which reads, runs each command (waiting in the lock if it must) and
// writes. It is kept next to the event loop so that both can be measured
// side by side (Config.Frontend).
type redconFrontend struct {
	s      *Server
	srv    *redcon.Server
	exited chan struct{}
}

func newRedconFrontend(s *Server) *redconFrontend {
	f := &redconFrontend{s: s, exited: make(chan struct{})}
	f.srv = redcon.NewServer("", f.serveRESP, f.accept, f.closed)
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

// serve accepts on ln (plain TCP, or TLS over it) in the background.
func (f *redconFrontend) serve(ln net.Listener) {
	go func() {
		err := f.srv.Serve(&limitListener{Listener: ln, max: f.s.cfg.MaxCommandBytes, keepAlive: f.s.cfg.KeepAlive})
		f.s.stopped(err)
		close(f.exited)
	}()
}

// close stops accepting and waits until redcon has closed every connection.
func (f *redconFrontend) close() error {
	err := f.srv.Close()
	<-f.exited
	return err
}

func (f *redconFrontend) accept(c redcon.Conn) bool {
	s := f.s
	if !s.reserveClient() {
		_ = c.NetConn().SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.NetConn().Write([]byte(s.refusal()))
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := s.newConnState(ctx, cancel)
	st.lim, _ = c.NetConn().(*limitConn)
	c.SetContext(st)
	nc := c.NetConn()
	s.register(st, c.RemoteAddr(), addrString(nc.LocalAddr()), func() { _ = nc.Close() })
	return true
}

func (f *redconFrontend) closed(c redcon.Conn, err error) {
	st, ok := c.Context().(*connState)
	if !ok {
		return // refused at accept: never counted
	}
	st.cancel()
	f.s.unregister(st)
	f.s.clients.Add(-1)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		f.s.log.Debug("connection closed", zap.String("remote", c.RemoteAddr()), zap.Error(err))
	}
}

func (f *redconFrontend) serveRESP(c redcon.Conn, cmd redcon.Command) {
	s := f.s
	st := c.Context().(*connState)
	if st.lim != nil {
		st.lim.consumed += int64(len(cmd.Raw))
	}
	if st.killed.Load() {
		c.Close()
		return
	}
	st.active.Store(time.Now().UnixNano())
	st.w.resp3 = st.resp3
	st.w.reset()
	name := s.exec(st, cmd.Args)
	if len(st.w.b) > 0 {
		c.WriteRaw(st.w.b)
	}
	if name == "quit" {
		c.Close()
	}
	s.onCommand(name)
}

// limitListener wraps connections so that a command larger than max bytes
// cannot make the server buffer it: redcon grows its read buffer to fit any
// command, so the limit lives in the connection's reads.
type limitListener struct {
	net.Listener
	max       int
	keepAlive time.Duration // <= 0: off
}

func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	raw := c
	if tc, ok := c.(*tls.Conn); ok {
		raw = tc.NetConn()
	}
	if tc, ok := raw.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		if l.keepAlive > 0 {
			_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: l.keepAlive, Interval: l.keepAlive / 5, Count: 3})
		} else {
			_ = tc.SetKeepAlive(false)
		}
	}
	return &limitConn{Conn: c, max: l.max, g: newGuard(maxArgs, int64(l.max), l.max)}, nil
}

// limitConn bounds what the server buffers for one connection: bytes read
// minus bytes of commands already handed to the handler. Only an incomplete
// command can make that grow, so the bound is exactly "no command larger
// than max". Reads and the handler run on redcon's one goroutine per
// connection, so the counters need no lock.
type limitConn struct {
	net.Conn
	max      int
	read     int64
	consumed int64
	g        *guard
}

var errTooLarge = errors.New("command too large")

// maxArgs bounds the arguments of one command; the largest lock command is a
// multi-key script, far below this.
const maxArgs = 1 << 16

func (c *limitConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read += int64(n)
	if c.read-c.consumed > int64(c.max) {
		fmt.Fprintf(c.Conn, "-ERR command exceeds %d bytes, the proxy's limit\r\n", c.max)
		return 0, errTooLarge
	}
	if gerr := c.g.feed(p[:n]); gerr != nil {
		fmt.Fprintf(c.Conn, "-ERR %s\r\n", oneLine(gerr.Error()))
		return 0, gerr
	}
	return n, err
}
