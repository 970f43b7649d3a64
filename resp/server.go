// Package resp is the proxy's Redis front end: a RESP2/RESP3 server (on
// tidwall/redcon) whose commands run as locks in a lockmap.Map. Existing
// Redis lock clients keep working unchanged: SET NX PX acquires, the
// compare-and-delete and compare-and-extend scripts of the major lock
// clients are recognised and run natively (scripts.go), and LOCK.* commands
// expose what Redis cannot: shared locks, waiting and fencing tokens.
package resp

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"
	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
)

// Config configures a Server.
type Config struct {
	Map  *lockmap.Map
	Wait lockmap.WaitPolicy
	// Password, if set, is required through AUTH or HELLO ... AUTH.
	Password string
	// MaxCommandBytes bounds one command on the wire (default 1 MiB); a
	// client that sends more is told so and disconnected.
	MaxCommandBytes int
	// MaxValueBytes bounds keys and tokens (default 64 KiB): lock tokens
	// are small, and a huge one is a mistake worth an error.
	MaxValueBytes int
	Logger        *zap.Logger
	// Version is reported as redis_version in INFO and HELLO. Clients gate
	// features on it, so it names the Redis release whose behaviour the
	// proxy follows.
	Version string
	// OnCommand, if set, is called after every command.
	OnCommand func(name string, took time.Duration)
	// Info, if set, adds lines to INFO's "# Locks" section.
	Info func() []string
}

func (c *Config) defaults() {
	if c.MaxCommandBytes <= 0 {
		c.MaxCommandBytes = 1 << 20
	}
	if c.MaxValueBytes <= 0 {
		c.MaxValueBytes = 64 << 10
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Version == "" {
		c.Version = "7.2.4"
	}
}

// Server serves RESP on listeners. It is safe for concurrent use.
type Server struct {
	cfg     Config
	log     *zap.Logger
	srv     *redcon.Server
	nextID  atomic.Int64
	clients atomic.Int64
	started time.Time

	scriptsMu sync.RWMutex
	loaded    map[string]*Script // SHA1 of bodies seen by SCRIPT LOAD or EVAL

	hangups hangups
}

// New returns a Server; call Serve to start it.
func New(cfg Config) *Server {
	cfg.defaults()
	s := &Server{cfg: cfg, log: cfg.Logger, loaded: map[string]*Script{}, started: time.Now()}
	s.srv = redcon.NewServer("", s.serveRESP, s.accept, s.closed)
	return s
}

// Clients is the number of connected clients.
func (s *Server) Clients() int64 { return s.clients.Load() }

// Serve accepts connections on ln until Close.
func (s *Server) Serve(ln net.Listener) error {
	return s.srv.Serve(&limitListener{Listener: ln, max: s.cfg.MaxCommandBytes})
}

// Close stops accepting and closes every connection.
func (s *Server) Close() error { return s.srv.Close() }

// connState is per-connection protocol state.
type connState struct {
	id      int64
	resp3   bool
	authed  bool
	name    string
	libName string
	libVer  string
	w       replyWriter
	srv     *Server
	lim     *limitConn
	ctx     context.Context
	cancel  context.CancelFunc
}

// queue is the lockmap Queue hook: while this connection's command waits in
// a lock's queue, a client hang-up cancels the wait.
func (st *connState) queue(ctx context.Context) (context.Context, func()) {
	if st.lim == nil {
		return ctx, func() {}
	}
	return st.srv.hangups.watch(ctx, st.lim.Conn)
}

func (s *Server) accept(c redcon.Conn) bool {
	ctx, cancel := context.WithCancel(context.Background())
	st := &connState{id: s.nextID.Add(1), srv: s, authed: s.cfg.Password == "", ctx: ctx, cancel: cancel}
	st.lim, _ = c.NetConn().(*limitConn)
	c.SetContext(st)
	s.clients.Add(1)
	return true
}

func (s *Server) closed(c redcon.Conn, err error) {
	if st, ok := c.Context().(*connState); ok {
		st.cancel()
	}
	s.clients.Add(-1)
	var perr interface{ Error() string }
	if err != nil && !errors.Is(err, net.ErrClosed) && errors.As(err, &perr) {
		s.log.Debug("connection closed", zap.String("remote", c.RemoteAddr()), zap.Error(err))
	}
}

func (s *Server) serveRESP(c redcon.Conn, cmd redcon.Command) {
	st := c.Context().(*connState)
	if st.lim != nil {
		st.lim.consumed += int64(len(cmd.Raw))
	}
	start := time.Now()
	st.w.resp3 = st.resp3
	st.w.reset()
	name := s.exec(st, cmd.Args)
	if len(st.w.b) > 0 {
		c.WriteRaw(st.w.b)
	}
	if name == "quit" {
		c.Close()
	}
	if s.cfg.OnCommand != nil {
		s.cfg.OnCommand(name, time.Since(start))
	}
}

// exec runs one command and writes its reply to st.w. It returns the
// command's name as counted in metrics.
func (s *Server) exec(st *connState, args [][]byte) (name string) {
	w := &st.w
	defer func() {
		// A handler bug must cost one reply, never the process.
		if r := recover(); r != nil {
			s.log.Error("command panicked", zap.String("command", name), zap.Any("panic", r), zap.Stack("stack"))
			w.reset()
			w.err("ERR internal error while running the command")
		}
	}()
	if len(args) == 0 {
		w.err("ERR empty command")
		return "empty"
	}
	name = strings.ToLower(string(args[0]))
	for _, a := range args[1:] {
		if len(a) > s.cfg.MaxValueBytes {
			w.err(fmt.Sprintf("ERR argument of %d bytes is too large for a lock proxy (max %d)", len(a), s.cfg.MaxValueBytes))
			return name
		}
	}
	c, ok := commands[name]
	if !ok {
		w.err(unknownCommand(name, args[1:]))
		return "unknown"
	}
	if !st.authed && !c.noAuth {
		w.err("NOAUTH Authentication required.")
		return name
	}
	if len(args) < c.minArgs || (c.maxArgs > 0 && len(args) > c.maxArgs) {
		w.err(fmt.Sprintf("ERR wrong number of arguments for '%s' command", name))
		return name
	}
	c.run(s, st, args)
	return name
}

func (s *Server) checkPassword(user, pass string) bool {
	if user != "" && user != "default" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(pass), []byte(s.cfg.Password)) == 1
}

// limitListener wraps connections so that a command larger than max bytes
// cannot make the server buffer it: redcon grows its read buffer to fit any
// command, so the limit lives in the connection's reads.
type limitListener struct {
	net.Listener
	max int
}

func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
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
