// Package resp is the proxy's Redis front end: a RESP2/RESP3 server whose
// commands run as locks in a lockmap.Map. Existing Redis lock clients keep
// working unchanged: SET NX PX acquires, the compare-and-delete and
// compare-and-extend scripts of the major lock clients are recognised and
// run natively (package scripts), and LOCK.* commands expose what Redis cannot:
// shared locks, waiting and fencing tokens.
//
// Two front ends serve the same commands: an event loop on gnet (gnet.go,
// loop.go), where a batch of pipelined commands costs one read and one write
// and commands that might wait run on a goroutine of their own, and one
// goroutine per connection ("redcon", redcon.go). Both accept connections
// on a goroutine of their own (accept.go) and read them through the same
// framing guard (package wire) and parser (parse.go).
package resp

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/rangelock"
	"github.com/shiftlock/shiftlock-proxy/resp/scripts"
	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

// Front ends (Config.Frontend).
const (
	FrontendGnet   = "gnet"
	FrontendRedcon = "redcon"
)

// Config configures a Server.
type Config struct {
	Map  *lockmap.Map
	Wait lockmap.WaitPolicy
	// Password, if set, is required through AUTH or HELLO ... AUTH.
	Password string
	// Users may AUTH by name and touch only keys matching their patterns
	// (acl.go). With users and no Password, the default user is off.
	Users []User
	// MaxCommandBytes bounds one command on the wire (default 1 MiB); a
	// client that sends more is told so and disconnected. On the gnet front
	// end it also bounds the input a connection may have buffered while one
	// of its commands waits for a lock.
	MaxCommandBytes int
	// MaxValueBytes bounds keys and tokens (default 64 KiB): lock tokens
	// are small, and a huge one is a mistake worth an error.
	MaxValueBytes int
	Logger        *zap.Logger
	// Version is reported as redis_version in INFO and HELLO. Clients gate
	// features on it, so it names the Redis release whose behaviour the
	// proxy follows.
	Version string
	// OnCommand, if set, is called after every command. (Not with its
	// duration: reading the clock twice per command costs more than the
	// lock work's bookkeeping, and a latency histogram belongs to clients.)
	// It may be called from several goroutines at once.
	OnCommand func(name string)
	// Info, if set, adds lines to INFO's "# Locks" section.
	Info func() []string
	// Frontend is FrontendGnet (default) or FrontendRedcon (a goroutine
	// per connection).
	Frontend string
	// EventLoops is the number of gnet event loops (default 1).
	EventLoops int
	// MaxClients caps the connected clients (default 10000, as Redis's
	// maxclients); one more is told "-ERR max number of clients reached"
	// and disconnected, as Redis does. Each client costs a file
	// descriptor: a process sizing it to its limit reserves ReservedFDs
	// for the server besides.
	MaxClients int
	// IdleTimeout closes a client idle for that long (Redis's timeout; 0,
	// the default, never does). A client with a command waiting for a lock
	// is not idle.
	IdleTimeout time.Duration
	// MaxOutputBytes caps the replies a connection may have waiting for
	// its socket (default 32 MiB): a client past it, which pipelines and
	// does not read, is disconnected. On the redcon front end a client's
	// goroutine blocks on the socket instead, so nothing piles up.
	MaxOutputBytes int
	// KeepAlive is the TCP keep-alive period of client connections
	// (Redis's tcp-keepalive; default 300 s, negative disables).
	KeepAlive time.Duration
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
	if c.Frontend == "" {
		c.Frontend = FrontendGnet
	}
	if c.EventLoops <= 0 {
		c.EventLoops = 1
	}
	if c.MaxClients <= 0 {
		c.MaxClients = 10000
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = 32 << 20
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = 300 * time.Second
	}
}

// errMaxClients is Redis's refusal of a connection past maxclients.
const errMaxClients = "-ERR max number of clients reached\r\n"

// reserveClient counts a new connection unless MaxClients are connected.
// Front ends with several accepting goroutines (gnet's loops) may race;
// the compare-and-swap keeps the cap exact.
func (s *Server) reserveClient() bool {
	if s.draining.Load() {
		return false
	}
	for {
		n := s.clients.Load()
		if n >= int64(s.cfg.MaxClients) {
			s.refused.Add(1)
			return false
		}
		if s.clients.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Drain turns new connections away (with errDraining), while the
// connected ones are served on: a proxy shutting down lets its clients
// release what they hold and its queued acquires finish.
func (s *Server) Drain() { s.draining.Store(true) }

// Blocked is the number of commands waiting in a lock's queue right now.
func (s *Server) Blocked() int64 { return s.blocked.Load() }

// refusal is what a connection that reserveClient turned away is told.
func (s *Server) refusal() string {
	if s.draining.Load() {
		return errDraining
	}
	return errMaxClients
}

const errDraining = "-TRYAGAIN shiftlock-proxy is shutting down; connect to another proxy, or retry\r\n"

// Refused is the number of connections refused for MaxClients (Redis's
// rejected_connections).
func (s *Server) Refused() int64 { return s.refused.Load() }

// frontend is one way of accepting connections and feeding their commands
// to Server.exec.
type frontend interface {
	listen(addr string) (net.Addr, error)
	close() error
}

// Server serves RESP. It is safe for concurrent use.
type Server struct {
	cfg     Config
	log     *zap.Logger
	fe      frontend
	nextID  atomic.Int64
	clients atomic.Int64
	refused atomic.Int64 // connections turned away at MaxClients
	// attacks counts cross-protocol requests (crossProtocolAttack);
	// attackLogged is when one was last logged (Unix ns).
	attacks      atomic.Int64
	attackLogged atomic.Int64
	// acceptFailed counts failed accepts, acceptLogged is when one was
	// last logged (accept.go); handshakesRefused counts TLS connections
	// closed at MaxHandshakes.
	acceptFailed      atomic.Int64
	acceptLogged      atomic.Int64
	handshakesRefused atomic.Int64
	// draining: new connections are turned away (Drain).
	draining atomic.Bool
	// conns are the connected clients by id (CLIENT LIST, CLIENT KILL,
	// the idle sweep).
	conns   sync.Map
	blocked atomic.Int64 // commands queued in a lock right now
	// retries tells a retry of an acquire from a first try (the wait
	// policy lets only retries wait: lockmap.WaitPolicy.BudgetFor).
	retries   lockmap.Retries
	offloaded atomic.Int64 // commands run on a goroutine of their own so far
	// loopGrants and loopWaitsOff count the acquires waited for on an
	// event loop (loopwait.go): answered there, or handed to a goroutine.
	loopGrants, loopWaitsOff atomic.Int64
	waiters                  waiters // the goroutines they run on
	started                  time.Time

	scriptsMu sync.RWMutex
	loaded    map[string]*scripts.Script // SHA1 of bodies seen by SCRIPT LOAD or EVAL

	mu     sync.Mutex
	addr   net.Addr
	done   chan error // receives the front end's end, once
	closed bool
	// stopSweep ends cron: the clock's ticks and the idle sweep.
	stopSweep chan struct{}
	// clock is the time (Unix nanoseconds) to tick resolution, for
	// activity stamps: reading the real clock per batch costs more than a
	// lock's bookkeeping on this path, and idle times count seconds. Redis
	// keeps its own clock the same way (server.unixtime, per cron tick).
	clock atomic.Int64
	// tlsFE serves the TLS port (ListenTLS), tlsAddr is where.
	tlsFE   *redconFrontend
	tlsAddr net.Addr

	hangups hangups // redcon only: see hangup.go
}

// New returns a Server; call Listen to start it.
func New(cfg Config) *Server {
	cfg.defaults()
	s := &Server{cfg: cfg, log: cfg.Logger, loaded: map[string]*scripts.Script{}, started: time.Now(), done: make(chan error, 1)}
	s.clock.Store(s.started.UnixNano())
	switch cfg.Frontend {
	case FrontendRedcon:
		s.fe = newRedconFrontend(s, nil)
	case FrontendGnet:
		s.fe = newGnetFrontend(s)
	}
	return s
}

// Clients is the number of connected clients.
func (s *Server) Clients() int64 { return s.clients.Load() }

// Listen binds addr (host:port; port 0 picks a free port, see Addr) and
// serves on it in the background until Close.
func (s *Server) Listen(addr string) error {
	if s.fe == nil {
		return fmt.Errorf("resp: unknown front end %q (want %q or %q)", s.cfg.Frontend, FrontendGnet, FrontendRedcon)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.addr != nil {
		return fmt.Errorf("resp: Listen called twice or after Close")
	}
	a, err := s.fe.listen(addr)
	if err != nil {
		return err
	}
	s.addr = a
	s.stopSweep = make(chan struct{})
	go s.cron(s.stopSweep)
	return nil
}

// Addr is the address Listen bound, with the port the kernel picked; nil
// before Listen.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Done receives the error that ended serving (nil after Close), once.
// ListenTLS also serves RESP over TLS on addr (Redis's tls-port), next to
// the plain port of Listen, with the same commands, limits and lock
// table. cfg carries the certificate, and for mutual TLS the client CAs
// and ClientAuth. TLS connections are served by a goroutine each (the
// redcon front end), whatever Frontend is: the event loop reads raw
// sockets.
//
// A TLS connection is a client, counted against MaxClients, once its
// handshake is done. Until then it counts against MaxHandshakes, and its
// handshake has HandshakeTimeout: connections that never finish one can
// neither take the clients' places (on both ports) nor hold up the others'
// handshakes beyond that. A client past MaxClients is refused over TLS,
// after its handshake, as Redis refuses it.
func (s *Server) ListenTLS(addr string, cfg *tls.Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.tlsFE != nil {
		return fmt.Errorf("resp: ListenTLS called twice or after Close")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	f := newRedconFrontend(s, cfg)
	f.serve(ln)
	s.tlsFE, s.tlsAddr = f, ln.Addr()
	// The TLS port's accept loop and connections are goroutines that Go's
	// netpoller wakes: while it is open, idle event loops park instead of
	// holding the P they need in epoll_wait (park.go). A TLS client's PING
	// waited 9-21 ms for sysmon while a plain client kept a loop busy.
	// Loops already blocked in epoll_wait choose again once woken.
	offLoop.Add(1)
	if g, ok := s.fe.(*gnetFrontend); ok {
		_ = g.eng.WakeLoops()
	}
	return nil
}

// TLSAddr is the TLS port's address (nil without ListenTLS).
func (s *Server) TLSAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tlsAddr
}

func (s *Server) Done() <-chan error { return s.done }

// stopped is how a front end reports that it no longer serves.
func (s *Server) stopped(err error) {
	select {
	case s.done <- err:
	default:
	}
}

// Close stops accepting and closes every connection. Commands still
// waiting for a lock see their connection's context cancelled.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.stopSweep != nil {
		close(s.stopSweep)
	}
	if s.tlsFE != nil {
		_ = s.tlsFE.close()
		offLoop.Add(-1)
	}
	if s.addr == nil || s.fe == nil {
		return nil
	}
	return s.fe.close()
}

// conn is a connection: who it is (CLIENT LIST), how it authenticated and
// which protocol it speaks, and how to close it. Commands change it only on
// the connection's own goroutine (redcon) or its event loop; a command that
// runs on a goroutine of its own (connState) reads only what does not
// change, and the atomics.
type conn struct {
	id      int64
	resp3   bool
	authed  bool
	name    string
	libName string
	libVer  string
	srv     *Server
	// raw is the connection the hang-up watch peeks at (redcon only; the
	// event loop sees hang-ups itself).
	raw net.Conn
	// attack: the client sent POST or Host: as a command (prepare); the
	// connection closes with nothing more answered.
	attack bool
	// base is the connection's own context, cancelled when it closes:
	// what a command that may wait runs under.
	base   context.Context
	cancel context.CancelFunc
	// queueHook is queue, made once: a method value made per command
	// would allocate. A command's state has its own (connState.queueHook).
	queueHook func(context.Context) (context.Context, func())
	// user is who AUTH made the connection (nil: the default user).
	user *User
	// habit is how the client on this connection retries (the wait policy
	// lets a first try wait only on a connection that has retried).
	habit lockmap.Habit
	// db is the database SELECT chose; CLIENT LIST reads it from other
	// connections. Its keys are locks of their own (dbKey).
	db atomic.Int32

	// What CLIENT LIST shows to other connections. addr, laddr and opened
	// are set before the connection is registered; infoMu guards name and
	// the lib fields, which other connections read.
	addr, laddr string
	opened      time.Time
	active      atomic.Int64 // Unix ns of the last command's start
	last        atomic.Pointer[command]
	waiting     atomic.Int32 // commands of this connection queued in a lock
	infoMu      sync.Mutex
	// close closes the connection from any goroutine; killed, set first,
	// has the connection serve nothing more meanwhile (kill).
	close  func()
	killed atomic.Bool
}

// connState is what one command runs with: its connection, where its reply
// goes, and how it may wait. A connection's commands run one after another
// on one connState (its goroutine's, or its event loop's), except those
// that have to wait: each of those gets a connState of its own and runs on
// a goroutine, while the connection goes on with its next commands; their
// replies are put back in order (replyQueue).
type connState struct {
	*conn
	w replyWriter
	// loop, while a lock command runs on an event loop (or first on a
	// redcon connection's goroutine), is the lock map as the loop uses it:
	// nothing on it blocks (table). Contexts carry cancellation only.
	loop *lockmap.Loop
	// blocked is set when a lock operation on the loop answered
	// lockmap.ErrWouldBlock: the command must run again where it may wait.
	blocked bool
	// bell, while a command runs on the event loop, is the loop's doorbell:
	// releases post their atomic on it, and over memory nodes across the
	// network an exclusive acquire starts on it. inline, while a lock
	// command runs on the loop: the memory nodes are in-process, and an
	// exclusive acquire that has to wait queues from here
	// (Loop.AcquireOrQueue). An acquire that is not done when its command
	// returns defers its reply (deferred; done hands the reply over once
	// the acquire is done).
	bell     *lockmap.Doorbell
	inline   bool
	deferred bool
	done     func(render func(*replyWriter))
	pend     *pending // done's entry
	// loopWaits, on a loop connection's own state, are the acquires its
	// loop waits for (loopwait.go); nil elsewhere.
	loopWaits *loopWaits
	// queued is a script's acquire that queued behind a holder on the loop
	// (scriptOps.Acquire): the script answered ErrWouldBlock and runs again
	// from the start on a goroutine, whose Acquire of the same key and token
	// waits on queued instead of asking the lock again.
	queued queuedAcquire
	// queueHook is the lockmap Queue hook lock commands pass: the
	// connection's, or, for a command left running, one that also marks
	// its entry as queued (pending.queued).
	queueHook func(context.Context) (context.Context, func())
	ops       scriptOps
	// Scratch space reused across commands, so that dispatch allocates
	// nothing: the lower-cased command name, a lower-cased script SHA1, the
	// KEYS and ARGV of a script.
	lname [24]byte // longest command name: lock.range.acquire (18)
	lsha  [40]byte
	keys  []string
	argv  []string
	// arena and args hold a command's arguments copied out of the input
	// buffer, for a command that runs on a goroutine (hold).
	arena []byte
	args  [][]byte
}

// hold copies args into st's own buffers, for a command that goes on
// running while the input buffer they point into is reused.
func (st *connState) hold(args [][]byte) [][]byte {
	size := 0
	for _, a := range args {
		size += len(a)
	}
	if cap(st.arena) < size {
		st.arena = make([]byte, 0, size)
	}
	// The arena has room for every argument, so appending never moves it
	// and the slices below stay valid.
	arena := st.arena[:0]
	st.args = st.args[:0]
	for _, a := range args {
		off := len(arena)
		arena = append(arena, a...)
		st.args = append(st.args, arena[off:len(arena):len(arena)])
	}
	st.arena = arena
	return st.args
}

// kill closes the connection (CLIENT KILL, the idle sweep). The close is
// asynchronous, so the flag stops it serving commands that arrive first,
// as Redis does with a client it is closing.
func (c *conn) kill() {
	c.killed.Store(true)
	c.close()
}

// register makes a new connection visible to CLIENT LIST and KILL.
func (s *Server) register(c *conn, addr, laddr string, close func()) {
	c.addr, c.laddr, c.close = addr, laddr, close
	c.opened = time.Now()
	c.active.Store(c.opened.UnixNano())
	s.conns.Store(c.id, c)
}

func (s *Server) unregister(c *conn) { s.conns.Delete(c.id) }

// newConnState is a new connection, with the state its commands run on.
func (s *Server) newConnState(ctx context.Context, cancel context.CancelFunc) *connState {
	c := &conn{id: s.nextID.Add(1), srv: s, authed: !s.needsAuth(), base: ctx, cancel: cancel}
	c.queueHook = c.queue
	return c.newState()
}

// lockTable is the lock map as a command uses it: the *lockmap.Map where
// the command may block, the event loop's *lockmap.Loop where it may not.
// Both take contexts for cancellation only; the mode is the type.
type lockTable interface {
	Acquire(ctx context.Context, keys []string, token string, opt lockmap.AcquireOptions) ([]uint64, bool, error)
	AcquireKey(ctx context.Context, key, token string, opt lockmap.AcquireOptions) (uint64, bool, error)
	Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error)
	ExtendAny(ctx context.Context, key string, ttl time.Duration) (bool, error)
	Reassign(ctx context.Context, keys, from []string, to string, ttl time.Duration) (bool, error)
	Lookup(ctx context.Context, key string) (lockmap.Info, error)
	RangeAcquire(ctx context.Context, key, token string, lo, hi uint64, mode rangelock.Mode, ttl, wait time.Duration) (uint64, bool, error)
}

var (
	_ lockTable = (*lockmap.Map)(nil)
	_ lockTable = (*lockmap.Loop)(nil)
)

// table is the lock map as st's command may use it.
func (st *connState) table() lockTable {
	if st.loop != nil {
		return st.loop
	}
	return st.srv.cfg.Map
}

// newState is a state for c's commands to run on.
func (c *conn) newState() *connState {
	st := &connState{conn: c, queueHook: c.queueHook}
	st.ops = scriptOps{s: c.srv, st: st}
	return st
}

// queue is the lockmap Queue hook: it counts commands queued in a lock
// (INFO blocked_clients) and, on redcon, watches for the client hanging up
// meanwhile. The event loop learns of a hang-up from the socket (OnClose)
// and cancels the connection's context itself.
func (c *conn) queue(ctx context.Context) (context.Context, func()) {
	s := c.srv
	s.blocked.Add(1)
	c.waiting.Add(1)
	// A wait's end counts as activity (as Redis's unblocking does), so the
	// idle timeout starts over from there.
	done := func() {
		c.active.Store(time.Now().UnixNano())
		c.waiting.Add(-1)
		s.blocked.Add(-1)
	}
	if c.raw == nil {
		return ctx, done
	}
	qctx, stop := s.hangups.watch(ctx, c.raw)
	return qctx, func() { stop(); done() }
}

// exec runs one command and writes its reply to st.w. It returns the
// command's name as counted in metrics.
func (s *Server) exec(st *connState, args [][]byte) (name string) {
	c, name := s.prepare(st, args)
	if c != nil {
		s.run(st, c, args)
	}
	return name
}

// prepare finds args' command and checks what every command needs
// (argument sizes, authentication, arity). It answers the errors itself and
// then returns a nil command. name is the command's name for metrics:
// "unknown", "empty", or a name from the command table, never a string
// made from client input.
func (s *Server) prepare(st *connState, args [][]byte) (*command, string) {
	if len(args) == 0 {
		st.w.err("ERR empty command")
		return nil, "empty"
	}
	if crossProtocol(args[0]) {
		s.crossProtocolAttack(st)
		return nil, "unknown"
	}
	c := st.lookup(args[0])
	name := "unknown"
	if c != nil {
		name = c.name
	}
	for _, a := range args[1:] {
		if len(a) > s.cfg.MaxValueBytes {
			st.w.err(fmt.Sprintf("ERR argument of %d bytes is too large for a lock proxy (max %d)", len(a), s.cfg.MaxValueBytes))
			return nil, name
		}
	}
	if c == nil {
		st.w.err(unknownCommand(strings.ToLower(string(args[0])), args[1:]))
		return nil, name
	}
	if !st.authed && !c.noAuth {
		st.w.err("NOAUTH Authentication required.")
		return nil, name
	}
	if len(args) < c.minArgs || (c.maxArgs > 0 && len(args) > c.maxArgs) {
		st.w.err(fmt.Sprintf("ERR wrong number of arguments for '%s' command", name))
		return nil, name
	}
	if st.user != nil && !st.keysAllowed(c, args) {
		return nil, name
	}
	// After the ACL check, which matches the keys the client named.
	nameKeys(c, args, st.db.Load())
	st.last.Store(c)
	return c, name
}

// crossProtocol reports whether name is POST or Host:, in any case: the
// first words of the lines of an HTTP request. A web page can make a
// browser send one to the proxy's port, and the body of a POST then
// arrives as commands: "DEL victim\r\nSET victim attacker NX PX 60000"
// would take a lock from anyone who can open that page. Redis closes such
// a connection for the same reason.
func crossProtocol(name []byte) bool {
	return equalFold(name, "POST") || equalFold(name, "HOST:")
}

// crossProtocolAttack marks st for closing with nothing more answered, and
// logs it as Redis does, at most once a minute so that a page reloading in
// a loop cannot fill the log.
func (s *Server) crossProtocolAttack(st *connState) {
	st.attack = true
	s.attacks.Add(1)
	now := time.Now().UnixNano()
	last := s.attackLogged.Load()
	if now-last < int64(time.Minute) || !s.attackLogged.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: commands to the proxy. "+
		"This is likely due to an attacker attempting to use Cross Protocol Scripting (a web page posting to this port) to take or release locks. Connection aborted.",
		zap.String("addr", st.addr), zap.Int64("attempts_so_far", s.attacks.Load()))
}

// CrossProtocolAttempts counts connections closed for sending POST or Host:
// as a command.
func (s *Server) CrossProtocolAttempts() int64 { return s.attacks.Load() }

// newGuard is a framing guard with the server's limits.
func (s *Server) newGuard() *wire.Guard {
	return wire.NewGuard(maxArgs, int64(s.cfg.MaxCommandBytes), min(wire.MaxInline, s.cfg.MaxCommandBytes))
}

// lookup finds a command by name, case-insensitively, without allocating:
// the name is lower-cased into the connection's scratch buffer, and a map
// index by string(bytes) does not copy.
func (st *connState) lookup(name []byte) *command {
	if len(name) > len(st.lname) {
		return nil
	}
	b := st.lname[:len(name)]
	for i, ch := range name {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		b[i] = ch
	}
	return commands[string(b)]
}

// run executes a prepared command. Its reply is appended to st.w, after
// whatever the event loop has already put there for earlier commands of
// the same batch.
func (s *Server) run(st *connState, c *command, args [][]byte) {
	w := &st.w
	mark := len(w.b)
	defer func() {
		// A handler bug must cost one reply, never the process.
		if r := recover(); r != nil {
			s.log.Error("command panicked", zap.String("command", c.name), zap.Any("panic", r), zap.Stack("stack"))
			w.b = w.b[:mark]
			w.err("ERR internal error while running the command")
		}
	}()
	c.run(s, st, args)
}

func (s *Server) onCommand(name string) {
	if s.cfg.OnCommand != nil {
		s.cfg.OnCommand(name)
	}
}

// clockTick is the resolution of Server.clock.
const clockTick = 100 * time.Millisecond

// cron keeps Server.clock and, with IdleTimeout, closes clients idle for
// longer than it, as Redis's timeout does, until stop closes. A client
// whose command waits in a lock's queue is not idle.
func (s *Server) cron(stop <-chan struct{}) {
	d := s.cfg.IdleTimeout
	every := min(d/4, time.Second)
	t := time.NewTicker(clockTick)
	defer t.Stop()
	var swept time.Time
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			s.clock.Store(now.UnixNano())
			if d <= 0 || now.Sub(swept) < every {
				continue
			}
			swept = now
			s.conns.Range(func(_, v any) bool {
				st := v.(*conn)
				if st.waiting.Load() == 0 && now.UnixNano()-st.active.Load() > int64(d) {
					s.log.Debug("closing idle client", zap.Int64("id", st.id), zap.String("addr", st.addr))
					st.kill()
				}
				return true
			})
		}
	}
}
