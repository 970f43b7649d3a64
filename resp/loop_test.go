package resp

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/lockmap/maptest"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/resp/scripts"
	"github.com/shiftlock/shiftlock-proxy/resp/wire"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// fakeConn is a connection for the loop without a socket: its input is a
// byte slice, its writes are recorded one by one.
type fakeConn struct {
	in     []byte
	writes [][]byte
	// slow: the client reads none of its replies until unread is reset;
	// the writes count as waiting for the socket.
	slow   bool
	unread int
	// onWrite, if set, is called at each write.
	onWrite func()
	// peeked counts the bytes Peek returned: what gnet copies when its
	// buffer wraps.
	peeked int
}

func (f *fakeConn) Peek(n int) ([]byte, error) {
	if n <= 0 || n > len(f.in) {
		n = len(f.in)
	}
	f.peeked += n
	return f.in[:n], nil
}

func (f *fakeConn) InboundBuffered() int { return len(f.in) }

func (f *fakeConn) Discard(n int) (int, error) {
	if n <= 0 {
		panic("Discard(<=0) drops all of gnet's input")
	}
	f.in = f.in[n:]
	return n, nil
}

func (f *fakeConn) Write(p []byte) (int, error) {
	f.writes = append(f.writes, append([]byte(nil), p...))
	if f.onWrite != nil {
		f.onWrite()
	}
	if f.slow {
		f.unread += len(p)
	}
	return len(p), nil
}

func (f *fakeConn) OutboundBuffered() int { return f.unread }

func (f *fakeConn) out() string {
	var b strings.Builder
	for _, w := range f.writes {
		b.Write(w)
	}
	return b.String()
}

// loopTasks is an event loop's task queue (gnet's Execute): the loop's pass
// adds the doorbell's ring to it, and the goroutines that post the doorbell
// add the memory node's answers.
type loopTasks struct {
	mu     sync.Mutex
	fs     []func()
	signal chan struct{}
}

func newLoopTasks() *loopTasks { return &loopTasks{signal: make(chan struct{}, 1)} }

func (q *loopTasks) add(f func()) {
	q.mu.Lock()
	q.fs = append(q.fs, f)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *loopTasks) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.fs)
}

// run runs the queued tasks, and those they queue, on the caller: the loop.
func (q *loopTasks) run() {
	for {
		q.mu.Lock()
		if len(q.fs) == 0 {
			q.mu.Unlock()
			return
		}
		f := q.fs[0]
		q.fs = q.fs[1:]
		q.mu.Unlock()
		f()
	}
}

// loopClient drives one loopConn as gnet's event loop would: input makes it
// run onTraffic, and so does the goroutine's wake-up.
type loopClient struct {
	t      testing.TB
	s      *Server
	lc     *loopConn
	f      fakeConn
	woke   chan struct{}
	tasks  *loopTasks
	closed bool
	gone   bool
}

func newLoopClient(t testing.TB, s *Server) *loopClient {
	tasks := newLoopTasks()
	return newLoopClientOn(t, s, s.newLoopBell(tasks.add), tasks)
}

// newLoopClientOn is newLoopClient for a connection of the loop whose
// doorbell and task queue are given: connections of one loop.
func newLoopClientOn(t testing.TB, s *Server, bell *loopBell, tasks *loopTasks) *loopClient {
	c := &loopClient{t: t, s: s, woke: make(chan struct{}, 1), tasks: tasks}
	c.lc = s.newLoopConn(func() {
		select {
		case c.woke <- struct{}{}:
		default: // one pending wake-up is enough: settle looks again
		}
	}, bell)
	c.lc.io = &c.f
	t.Cleanup(c.hangUp)
	return c
}

// pass runs onTraffic and then, as gnet does after a pass's events, the
// tasks the pass left (a doorbell's ring).
func (c *loopClient) pass() {
	c.closed = c.s.onTraffic(c.lc, &c.f)
	c.tasks.run()
}

// send appends input and runs the loop once, as a read would.
func (c *loopClient) send(in string) {
	c.t.Helper()
	if c.closed {
		c.t.Fatal("send on a closed connection")
	}
	c.f.in = append(c.f.in, in...)
	c.pass()
	if c.closed {
		c.hangUp()
	}
}

// settle waits until no command of this connection runs on a goroutine or
// waits for the memory node, running the loop on each wake-up and task.
func (c *loopClient) settle() {
	c.t.Helper()
	for c.lc.busy() && !c.closed {
		select {
		case <-c.woke:
		case <-c.tasks.signal:
		case <-time.After(time.Minute):
			c.t.Fatal("a held command never finished")
		}
		c.pass()
		if c.closed {
			c.hangUp()
		}
	}
}

// hangUp is gnet's OnClose, once.
func (c *loopClient) hangUp() {
	if !c.gone {
		c.gone = true
		c.s.closeLoopConn(c.lc)
	}
}

// do sends one command, waits for it, and returns what it wrote.
func (c *loopClient) do(args ...string) string {
	c.t.Helper()
	n := len(c.f.writes)
	c.send(respCmd(args...))
	c.settle()
	var b strings.Builder
	for _, w := range c.f.writes[n:] {
		b.Write(w)
	}
	return b.String()
}

// respCmd encodes a command as a client sends it.
func respCmd(args ...string) string { return string(wire.AppendCommand(nil, args...)) }

// loopServer is a Server over an embedded (inline) memory node whose SET NX
// waits up to a minute for a held key: tests release the holder instead.
func loopServer(t testing.TB, tweak func(*Config)) *Server {
	t.Helper()
	s, _ := loopServerEP(t, tweak)
	return s
}

// loopServerEP is loopServer with its memory-node endpoint, whose counters
// tell what the lock commands cost.
func loopServerEP(t testing.TB, tweak func(*Config)) (*Server, rdma.Endpoint) {
	t.Helper()
	m, ep := maptest.Embedded(t, memnode.Config{Entries: 1 << 10, DeadAfter: time.Hour}, lockmap.Config{})
	cfg := Config{Map: m, Logger: zap.NewNop(), Wait: lockmap.WaitPolicy{Rules: []lockmap.WaitRule{{Pattern: "*", Wait: time.Minute}}}}
	if tweak != nil {
		tweak(&cfg)
	}
	return New(cfg), ep
}

// TestLoopWaitingAcquireEnqueuesOnce: on the embedded memory node, a SET NX
// that has to wait costs the memory node one atomic, the enqueue, and is
// handed the lock: it is not tried on the loop, refused and run again from
// the start on a goroutine (issue 34: a try, then the enqueue).
func TestLoopWaitingAcquireEnqueuesOnce(t *testing.T) {
	s, ep := loopServerEP(t, nil)
	holder, waiter := newLoopClient(t, s), newLoopClient(t, s)
	if r := holder.do("SET", "k", "holder", "PX", "60000", "NX"); r != "+OK\r\n" {
		t.Fatalf("holder: %q", r)
	}
	before := ep.Counters().Snapshot()
	waiter.send(respCmd("SET", "k", "waiter", "PX", "60000", "NX") + respCmd("PING"))
	awaitBlocked(t, s, 1) // queued in the lock
	if d := ep.Counters().Snapshot().Sub(before); d.OutAtomics() != 1 {
		t.Fatalf("a waiting SET NX cost %d atomics (%v), want 1: the enqueue", d.OutAtomics(), d.Out)
	}
	if len(waiter.f.writes) != 0 {
		t.Fatalf("answered while queued: %q", waiter.f.out())
	}
	if r := holder.do("DEL", "k"); r != ":1\r\n" {
		t.Fatalf("DEL: %q", r)
	}
	waiter.settle()
	if got := waiter.f.out(); got != "+OK\r\n+PONG\r\n" {
		t.Fatalf("waiter: %q", got)
	}
	if r := holder.do("GET", "k"); r != "$6\r\nwaiter\r\n" {
		t.Fatalf("GET after the handover: %q", r)
	}
}

// replies splits a stream into its RESP values, or fails the test if it is
// not a sequence of complete, well-formed values.
func replies(t testing.TB, out string) []string {
	t.Helper()
	vals, err := splitReplies(out)
	if err != nil {
		t.Fatalf("malformed output %q: %v", out, err)
	}
	return vals
}

func splitReplies(out string) ([]string, error) {
	var vals []string
	for len(out) > 0 {
		n, err := valueLen(out)
		if err != nil {
			return vals, err
		}
		vals = append(vals, out[:n])
		out = out[n:]
	}
	return vals, nil
}

// valueLen is the length of the RESP2/RESP3 value at the front of s.
func valueLen(s string) (int, error) {
	i := strings.Index(s, "\r\n")
	if i < 1 {
		return 0, fmt.Errorf("no CRLF-terminated line in %q", s)
	}
	line, n := s[1:i], i+2
	switch s[0] {
	case '+', '-', ':', '_':
		return n, nil
	case '$', '=':
		l, err := strconv.Atoi(line)
		if err != nil || l < -1 {
			return 0, fmt.Errorf("bad length %q", line)
		}
		if l == -1 {
			return n, nil
		}
		if len(s) < n+l+2 || s[n+l:n+l+2] != "\r\n" {
			return 0, fmt.Errorf("bulk of %d not terminated", l)
		}
		return n + l + 2, nil
	case '*', '%':
		k, err := strconv.Atoi(line)
		if err != nil || k < 0 {
			return 0, fmt.Errorf("bad count %q", line)
		}
		if s[0] == '%' {
			k *= 2
		}
		for ; k > 0; k-- {
			m, err := valueLen(s[n:])
			if err != nil {
				return 0, err
			}
			n += m
		}
		return n, nil
	}
	return 0, fmt.Errorf("unknown type %q", s[0])
}

const casDeleteBody = `if redis.call("get",KEYS[1]) == ARGV[1] then
    return redis.call("del",KEYS[1])
else
    return 0
end`

// awaitBlocked waits until n commands are queued in a lock.
func awaitBlocked(t testing.TB, s *Server, n int64) {
	t.Helper()
	for end := time.Now().Add(time.Minute); s.blocked.Load() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("blocked clients: %d, want %d", s.blocked.Load(), n)
		}
	}
}

// TestLoopPipelineOneWrite: every command of a pipeline that arrives at
// once is answered, in order, with one write.
func TestLoopPipelineOneWrite(t *testing.T) {
	s := loopServer(t, nil)
	c := newLoopClient(t, s)
	sha := strings.TrimSpace(c.do("SCRIPT", "LOAD", casDeleteBody)[len("$40\r\n"):])
	c.f.writes = nil
	var in strings.Builder
	var want []string
	for i := 0; i < 50; i++ {
		k := fmt.Sprintf("k%d", i)
		in.WriteString(respCmd("SET", k, "tok", "PX", "60000", "NX"))
		in.WriteString(respCmd("ping"))
		in.WriteString(respCmd("GET", k))
		in.WriteString(respCmd("EVALSHA", sha, "1", k, "tok"))
		in.WriteString(respCmd("ECHO", k))
		want = append(want, "+OK\r\n", "+PONG\r\n", "$3\r\ntok\r\n", ":1\r\n", fmt.Sprintf("$%d\r\n%s\r\n", len(k), k))
	}
	c.send(in.String())
	if c.lc.busy() || c.closed {
		t.Fatalf("busy %v closed %v after an uncontended pipeline", c.lc.busy(), c.closed)
	}
	if len(c.f.writes) != 1 {
		t.Fatalf("%d writes for one batch, want 1", len(c.f.writes))
	}
	got := replies(t, c.f.out())
	if strings.Join(got, "") != strings.Join(want, "") {
		t.Fatalf("replies:\n%q\nwant:\n%q", got, want)
	}
	if len(c.f.in) != 0 {
		t.Fatalf("%d input bytes left over", len(c.f.in))
	}
	if n := s.offloaded.Load(); n != 0 {
		t.Fatalf("%d commands went to a goroutine on an inline map with free keys", n)
	}
}

// TestLoopInputInPieces: a pipeline that arrives a byte at a time gets the
// same replies as one that arrives at once.
func TestLoopInputInPieces(t *testing.T) {
	s := loopServer(t, nil)
	in := respCmd("SET", "a", "t", "NX") + "PING\r\n\r\n" + respCmd("GET", "a") + "$x y\r\n" + respCmd("DEL", "a") + respCmd("EXISTS", "a")
	want := "+OK\r\n+PONG\r\n$1\r\nt\r\n-ERR unknown command '$x'"
	c := newLoopClient(t, s)
	for i := range in {
		c.send(in[i : i+1])
	}
	c.settle()
	out := c.f.out()
	if !strings.HasPrefix(out, want) || !strings.HasSuffix(out, ":1\r\n:0\r\n") || len(replies(t, out)) != 6 {
		t.Fatalf("byte by byte: %q", out)
	}
}

// TestLoopWaitingAcquire: on an inline map, SET NX on a held key with a
// wait budget queues from the loop and waits on a goroutine, its reply
// deferred (it is not run again: TestLoopWaitingAcquireEnqueuesOnce); the
// commands pipelined behind it run at once (a GET of its key once it has
// queued: it sees the holder), and are answered after it, in order, once
// the holder releases.
func TestLoopWaitingAcquire(t *testing.T) {
	var mu sync.Mutex
	var names []string
	s := loopServer(t, func(c *Config) {
		c.OnCommand = func(name string) {
			mu.Lock()
			names = append(names, name)
			mu.Unlock()
		}
	})
	holder, waiter := newLoopClient(t, s), newLoopClient(t, s)
	if r := holder.do("SET", "k", "holder", "PX", "60000", "NX"); r != "+OK\r\n" {
		t.Fatalf("holder: %q", r)
	}
	waiter.send(respCmd("SET", "k", "waiter", "PX", "60000", "NX") + respCmd("PING") + respCmd("GET", "k"))
	if !waiter.lc.busy() || len(waiter.f.writes) != 0 {
		t.Fatalf("the SET was not left waiting (busy %v, wrote %q)", waiter.lc.busy(), waiter.f.out())
	}
	if s.offloaded.Load() != 0 {
		t.Fatalf("offloaded %d commands, want 0: the SET waits where it queued", s.offloaded.Load())
	}
	awaitBlocked(t, s, 1) // queued in the lock
	// The loop keeps serving others meanwhile, and runs more pipelined
	// input of the waiting connection, holding its replies.
	if r := holder.do("PING"); r != "+PONG\r\n" {
		t.Fatalf("another connection while one waits: %q", r)
	}
	waiter.send(respCmd("ECHO", "later"))
	if len(waiter.f.writes) != 0 {
		t.Fatalf("answered while its first command waits: %q", waiter.f.out())
	}
	mu.Lock()
	names = nil
	mu.Unlock()
	if r := holder.do("DEL", "k"); r != ":1\r\n" {
		t.Fatalf("release: %q", r)
	}
	waiter.settle()
	if got, want := waiter.f.out(), "+OK\r\n+PONG\r\n$6\r\nholder\r\n$5\r\nlater\r\n"; got != want {
		t.Fatalf("replies %q, want %q", got, want)
	}
	if len(waiter.f.writes) != 1 {
		t.Fatalf("%d writes for the waited command and what followed it, want 1", len(waiter.f.writes))
	}
	mu.Lock()
	defer mu.Unlock()
	// The SET and the commands behind it were counted as they ran on the
	// loop, before the DEL.
	slices.Sort(names)
	if strings.Join(names, ",") != "del" {
		t.Fatalf("OnCommand saw %v", names)
	}
}

// TestLoopScriptWouldBlock: a script whose first lock-table call would block
// on the loop changes nothing there and runs again on a goroutine.
func TestLoopScriptWouldBlock(t *testing.T) {
	s := loopServer(t, nil)
	holder, waiter := newLoopClient(t, s), newLoopClient(t, s)
	holder.do("SET", "s", "holder", "PX", "60000", "NX")
	// redis-py's Lua acquire for version 2.10 (SETNX, PEXPIRE), recognised by
	// SHA1 and run natively: its Acquire waits like SET NX.
	sc := byID(t, "redis-py/acquire-2.10")
	waiter.send(respCmd("EVALSHA", sc.SHA1, "1", "s", "waiter", "60000"))
	if !waiter.lc.busy() {
		t.Fatalf("the script did not go to a goroutine: %q", waiter.f.out())
	}
	awaitBlocked(t, s, 1)
	holder.do("DEL", "s")
	waiter.settle()
	if got := waiter.f.out(); got != ":1\r\n" {
		t.Fatalf("script reply %q, want :1", got)
	}
	if r := holder.do("GET", "s"); r != "$6\r\nwaiter\r\n" {
		t.Fatalf("GET after the script: %q", r)
	}
}

func byID(t testing.TB, id string) *scripts.Script {
	for _, sc := range scripts.Catalogue() {
		if sc.ID == id {
			return sc
		}
	}
	t.Fatalf("no script %s", id)
	return nil
}

// TestLoopHangUpWhileQueued: a connection that closes while its command
// waits in a lock's queue abandons the wait; when the holder releases, the
// lock is passed on and released at once rather than kept for the TTL.
func TestLoopHangUpWhileQueued(t *testing.T) {
	s := loopServer(t, nil)
	holder, quitter, next := newLoopClient(t, s), newLoopClient(t, s), newLoopClient(t, s)
	holder.do("SET", "h", "holder", "PX", "60000", "NX")
	quitter.send(respCmd("SET", "h", "quitter", "PX", "60000", "NX"))
	awaitBlocked(t, s, 1)
	quitter.hangUp() // gnet's OnClose
	awaitBlocked(t, s, 0)
	holder.do("DEL", "h")
	for end := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		if r := next.do("LOCK.ACQUIRE", "h", "next", "PX", "60000", "WAIT", "0"); strings.HasPrefix(r, ":") {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the lock stayed with a client that hung up while queued")
		}
	}
	if st := s.cfg.Map.Domains()[0].Client.Stats(); st.Abandoned.Load() != 1 {
		t.Fatalf("abandoned waits: %d, want 1", st.Abandoned.Load())
	}
}

// TestLoopPipelineLimit: behind maxPending commands still waiting, a
// connection may buffer up to MaxOutputBytes; past that it is told why and
// closed, which abandons the waits.
func TestLoopPipelineLimit(t *testing.T) {
	defer func(n int) { maxPending = n }(maxPending)
	maxPending = 1
	s := loopServer(t, func(c *Config) { c.MaxOutputBytes = 1024 })
	holder, flood := newLoopClient(t, s), newLoopClient(t, s)
	holder.do("SET", "p", "holder", "PX", "60000", "NX")
	flood.send(respCmd("SET", "p", "flood", "PX", "60000", "NX"))
	awaitBlocked(t, s, 1)
	flood.send(strings.Repeat("PING\r\n", 100)) // 600 bytes: fine
	if flood.closed || len(flood.f.writes) != 0 {
		t.Fatalf("closed %v, wrote %q under the limit", flood.closed, flood.f.out())
	}
	flood.send(strings.Repeat("PING\r\n", 100)) // 1200 bytes: too many
	if !flood.closed {
		t.Fatal("still open past the limit")
	}
	if got := flood.f.out(); !strings.HasPrefix(got, "-ERR more than 1024 bytes of commands and replies wait behind commands still running") {
		t.Fatalf("reply %q", got)
	}
	awaitBlocked(t, s, 0) // the wait was abandoned
}

// TestLoopInputAfterTheLastCommandIsBounded: after QUIT, or bad input, a
// connection reads nothing more and closes once its waiting command is
// answered; what the client sends meanwhile piles up in its input buffer,
// and past MaxOutputBytes the connection is closed. Before, a client could
// pile up input without limit behind a QUIT and a WAIT of a minute.
func TestLoopInputAfterTheLastCommandIsBounded(t *testing.T) {
	for _, last := range []string{"QUIT\r\n", "ECHO \"a\r\n"} {
		s := loopServer(t, func(c *Config) { c.MaxOutputBytes = 1024 })
		holder, c := newLoopClient(t, s), newLoopClient(t, s)
		holder.do("SET", "q", "holder", "PX", "60000", "NX")
		c.send(respCmd("SET", "q", "c", "PX", "60000", "NX"))
		awaitBlocked(t, s, 1)
		c.send(last)
		c.send(strings.Repeat("PING\r\n", 100)) // 600 bytes: kept
		if c.closed {
			t.Fatalf("%q: closed under the limit", last)
		}
		c.send(strings.Repeat("PING\r\n", 100)) // 1200 bytes: too many
		if !c.closed {
			t.Fatalf("%q: still open with more than the limit buffered", last)
		}
		if got := c.f.out(); got != "" {
			t.Fatalf("%q: output %q: nothing after the last command runs", last, got)
		}
	}
}

// TestLoopLargeBatchNotLimited: the limit is on input left waiting, not on
// what arrives at once: a large pipeline of quick commands is all served.
func TestLoopLargeBatchNotLimited(t *testing.T) {
	s := loopServer(t, func(c *Config) { c.MaxCommandBytes = 1024 })
	c := newLoopClient(t, s)
	c.send(strings.Repeat("PING\r\n", 1000))
	if c.closed || len(replies(t, c.f.out())) != 1000 {
		t.Fatalf("closed %v after %d replies", c.closed, len(replies(t, c.f.out())))
	}
}

// TestLoopBadInput: what the guard, the parser or the size limit rejects
// gets an error reply and a closed connection; while a command of the
// connection waits, behind that command's reply, once it has one, as
// Redis answers a blocked command before it reads what follows. Before,
// the error went out at once and the replies held behind the waiting
// command, and its own, were dropped: a lock granted by a command ahead
// of the bad input was held with its client never told.
func TestLoopBadInput(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{name: "huge multibulk count", in: "*3000000000\r\n", want: "-ERR protocol error: 3000000000 arguments"},
		{name: "huge bulk", in: "*2\r\n$3\r\nGET\r\n$99999999999\r\n", want: "-ERR protocol error: bulk of 99999999999 bytes"},
		{name: "not RESP after a count", in: "*1\r\n+PING\r\n", want: "-ERR protocol error: expected '$'"},
		{name: "bulk not terminated", in: "*1\r\n$4\r\nPINGxx", want: "-ERR Protocol error: invalid bulk length"},
		{name: "unbalanced quotes", in: "ECHO \"a\r\n", want: "-ERR Protocol error: unbalanced quotes"},
		{name: "command too large", in: "*100\r\n" + strings.Repeat("$20\r\n"+strings.Repeat("x", 20)+"\r\n", 50),
			want: "-ERR command exceeds 1024 bytes, the proxy's limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := loopServer(t, func(c *Config) { c.MaxCommandBytes = 1024 })
			c := newLoopClient(t, s)
			c.send("PING\r\n")
			c.send(tc.in)
			if !c.closed {
				t.Fatal("connection left open")
			}
			if got := c.f.out(); !strings.HasPrefix(got, "+PONG\r\n"+tc.want) {
				t.Fatalf("output %q, want %q after the PONG", got, tc.want)
			}
		})
		t.Run(tc.name+" while waiting", func(t *testing.T) {
			s := loopServer(t, func(c *Config) { c.MaxCommandBytes = 1024 })
			holder, c := newLoopClient(t, s), newLoopClient(t, s)
			holder.do("SET", "w", "holder", "PX", "60000", "NX")
			c.send(respCmd("SET", "v", "c", "PX", "60000", "NX") + respCmd("SET", "w", "c", "PX", "60000", "NX"))
			awaitBlocked(t, s, 1)
			c.send(tc.in)
			if c.closed || c.f.out() != "+OK\r\n" {
				t.Fatalf("closed %v, output %q while a command ahead of the bad input waits", c.closed, c.f.out())
			}
			holder.do("DEL", "w")
			c.settle()
			if want := "+OK\r\n+OK\r\n" + tc.want; !c.closed || !strings.HasPrefix(c.f.out(), want) {
				t.Fatalf("closed %v, output %q, want %q", c.closed, c.f.out(), want)
			}
		})
	}
}

// TestLoopQuit: QUIT is answered, with what came before it, and closes;
// what follows it is not run.
func TestLoopQuit(t *testing.T) {
	s := loopServer(t, nil)
	c := newLoopClient(t, s)
	c.send("PING\r\nQUIT\r\n" + respCmd("SET", "q", "t", "NX"))
	if !c.closed || c.f.out() != "+PONG\r\n+OK\r\n" {
		t.Fatalf("closed %v, output %q", c.closed, c.f.out())
	}
	if s.cfg.Map.Count() != 0 {
		t.Fatal("a command after QUIT ran")
	}
}

// TestLoopConnectionState: authentication, the protocol version and the
// connection id are per connection, as on redcon.
func TestLoopConnectionState(t *testing.T) {
	s := loopServer(t, func(c *Config) { c.Password = "pw" })
	a, b := newLoopClient(t, s), newLoopClient(t, s)
	if r := a.do("GET", "x"); r != "-NOAUTH Authentication required.\r\n" {
		t.Fatalf("before AUTH: %q", r)
	}
	if r := a.do("AUTH", "pw"); r != "+OK\r\n" {
		t.Fatalf("AUTH: %q", r)
	}
	if r := a.do("GET", "x"); r != "$-1\r\n" {
		t.Fatalf("GET in RESP2: %q", r)
	}
	if r := a.do("HELLO", "3"); !strings.HasPrefix(r, "%7\r\n") {
		t.Fatalf("HELLO 3: %q", r)
	}
	if r := a.do("GET", "x"); r != "_\r\n" {
		t.Fatalf("GET in RESP3: %q", r)
	}
	if r := b.do("GET", "x"); !strings.HasPrefix(r, "-NOAUTH") {
		t.Fatalf("another connection: %q", r)
	}
	if a.do("CLIENT", "ID") == b.do("CLIENT", "ID") {
		t.Fatal("two connections share an id")
	}
	if s.Clients() != 2 {
		t.Fatalf("Clients() = %d", s.Clients())
	}
	a.hangUp()
	if s.Clients() != 1 {
		t.Fatalf("Clients() = %d after a hang-up", s.Clients())
	}
}

// TestLoopMaxValueBytes: an argument over MaxValueBytes is refused, the
// connection stays.
func TestLoopMaxValueBytes(t *testing.T) {
	s := loopServer(t, func(c *Config) { c.MaxValueBytes = 8 })
	c := newLoopClient(t, s)
	if r := c.do("SET", "k", "123456789", "NX"); !strings.HasPrefix(r, "-ERR argument of 9 bytes is too large") || c.closed {
		t.Fatalf("%q closed=%v", r, c.closed)
	}
	if r := c.do("PING"); r != "+PONG\r\n" {
		t.Fatalf("after: %q", r)
	}
}

// TestLoopPanicCostsOneReply: a panicking handler answers an error in its
// own place of the batch; the replies around it are kept.
func TestLoopPanicCostsOneReply(t *testing.T) {
	s := loopServer(t, nil)
	commands["test.panic"] = &command{name: "test.panic", minArgs: 1, run: func(*Server, *connState, [][]byte) {
		panic("boom")
	}}
	t.Cleanup(func() { delete(commands, "test.panic") })
	c := newLoopClient(t, s)
	c.send("PING\r\nTEST.PANIC\r\nECHO x\r\n")
	if got := c.f.out(); got != "+PONG\r\n-ERR internal error while running the command\r\n$1\r\nx\r\n" {
		t.Fatalf("output %q", got)
	}
}

// TestDoorbellSharedByConnections is verb batching across connections: on
// a memory node across the network, the acquires that many connections
// send in one pass of the loop cost one round trip together, and so do
// their releases in the next.
func TestDoorbellSharedByConnections(t *testing.T) {
	m, ep := maptest.Network(t, shiftlock.Config{OwnerTags: true})
	s := New(Config{Map: m, Logger: zap.NewNop()})
	tasks := newLoopTasks()
	bell := s.newLoopBell(tasks.add)
	const n = 20
	type conn struct {
		lc *loopConn
		f  fakeConn
	}
	woke := make(chan struct{}, 1)
	cs := make([]*conn, n)
	for i := range cs {
		c := &conn{}
		c.lc = s.newLoopConn(func() {
			select {
			case woke <- struct{}{}:
			default:
			}
		}, bell)
		t.Cleanup(func() { s.closeLoopConn(c.lc) })
		cs[i] = c
	}
	// pass delivers each connection's input, runs the ring the pass left,
	// and then the memory node's answers and the connections they woke,
	// until everyone is answered.
	pass := func(input func(i int) string) {
		t.Helper()
		for i, c := range cs {
			c.f.in = append(c.f.in, input(i)...)
			if s.onTraffic(c.lc, &c.f) {
				t.Fatal("closed")
			}
		}
		if k := tasks.len(); k != 1 {
			t.Fatalf("%d rings scheduled for one pass, want 1", k)
		}
		for {
			tasks.run()
			busy := 0
			for _, c := range cs {
				if c.lc.busy() {
					s.onTraffic(c.lc, &c.f)
				}
				if c.lc.busy() {
					busy++
				}
			}
			if busy == 0 {
				return
			}
			select {
			case <-woke:
			case <-tasks.signal:
			case <-time.After(time.Minute):
				t.Fatalf("%d connections were never answered", busy)
			}
		}
	}
	before := ep.Counters().Snapshot()
	pass(func(i int) string { return respCmd("SET", fmt.Sprint("k", i), "t", "NX", "PX", "60000") })
	pass(func(i int) string { return respCmd("EVAL", casDeleteBody, "1", fmt.Sprint("k", i), "t") })
	d := ep.Counters().Snapshot().Sub(before)
	for i, c := range cs {
		if got := c.f.out(); got != "+OK\r\n:1\r\n" {
			t.Fatalf("connection %d: %q", i, got)
		}
	}
	if d.OutAtomics() != 2*n || d.Out[rdma.VerbBatch] != 2 {
		t.Fatalf("%d acquires and releases from %d connections cost %v; want %d atomics in 2 round trips", n, n, d.Out, 2*n)
	}
}

// TestLoopWritesRepliesAsTheyFill: a pipeline whose replies are far larger
// than itself (COMMAND) is answered in writes of about flushAt, not held in
// one buffer until its last command has run (issue 32, item 5).
func TestLoopWritesRepliesAsTheyFill(t *testing.T) {
	s := loopServer(t, nil)
	c := newLoopClient(t, s)
	one := len(c.do("COMMAND"))
	n := 4*flushAt/one + 1
	c.send(strings.Repeat("COMMAND\r\n", n))
	c.settle()
	writes := c.f.writes[1:]
	total := 0
	for _, w := range writes {
		if len(w) > flushAt+one {
			t.Fatalf("a write of %d bytes; replies go out every %d", len(w), flushAt)
		}
		total += len(w)
	}
	if len(writes) < 4 || total != n*one {
		t.Fatalf("%d writes of %d bytes in all, want at least 4 and %d", len(writes), total, n*one)
	}
}

// TestLoopPausesForASlowReader: a client that pipelines commands with long
// replies and reads them late has the loop stop running its input once
// pauseAt bytes of replies wait for the socket, and go on once they are
// read. Before, the loop ran the whole input: a megabyte of unknown
// commands left the proxy holding 32 MB of errors and closing the client,
// and its peak memory grew by up to 92 MB (itest TestInputMemoryIsBounded).
func TestLoopPausesForASlowReader(t *testing.T) {
	s := loopServer(t, nil)
	c := newLoopClient(t, s)
	one := len(c.do("COMMAND"))
	n := 4*pauseAt/one + 1
	c.f.slow = true
	c.send(strings.Repeat("COMMAND\r\n", n))
	if c.closed {
		t.Fatal("closed")
	}
	if got := c.f.unread; got > pauseAt+flushAt+one {
		t.Fatalf("%d bytes of replies wait for a client that does not read; the loop pauses at %d", got, pauseAt)
	}
	if len(c.f.in) == 0 {
		t.Fatal("the loop ran all of the input for a client that does not read")
	}
	// The client reads: the timer's wake-ups run the rest.
	deadline := time.Now().Add(time.Minute)
	for len(c.f.in) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("a paused connection never resumed")
		}
		c.f.unread = 0
		select {
		case <-c.woke:
			c.pass()
		case <-time.After(time.Second):
			t.Fatal("no wake-up for a paused connection")
		}
	}
	if got := len(replies(t, c.f.out())); got != n+1 {
		t.Fatalf("%d replies, want %d", got, n+1)
	}
}

// TestLoopClosesAClientThatNeverReads: paused, the input the client goes on
// sending counts against MaxOutputBytes with its replies.
func TestLoopClosesAClientThatNeverReads(t *testing.T) {
	s := loopServer(t, func(c *Config) { c.MaxOutputBytes = 4 << 20 })
	c := newLoopClient(t, s)
	c.f.slow = true
	chunk := strings.Repeat("COMMAND\r\n", 10000)
	for i := 0; i < 1000 && !c.closed; i++ {
		c.f.in = append(c.f.in, chunk...)
		c.pass()
	}
	if !c.closed {
		t.Fatal("a client that never reads its replies was never closed")
	}
	if got := c.f.unread + len(c.f.in); got > 4<<20+len(chunk)+flushAt {
		t.Fatalf("%d bytes waited for the client when it was closed; limit %d", got, 4<<20)
	}
}

// TestLoopPeeksItsInputOnce: however much input waits, a pass looks at a
// window of it, so the loop reads each input byte a few times at most.
// Before, every pass peeked all the buffered input, which gnet copies when
// its buffer wraps: a client pipelining PINGs without reading had the loop
// copy its input once per 64 KiB of replies (16 times the input for 4 MB,
// 250 times for the 32 MB a paused client may leave), the loop's other
// clients ran 100 times slower, and the heap grew by 200 MB.
func TestLoopPeeksItsInputOnce(t *testing.T) {
	s := loopServer(t, nil)
	bound := func(t *testing.T, c *loopClient, sent int) {
		t.Helper()
		if c.f.peeked > 2*sent+2*peekWindow {
			t.Errorf("the loop peeked %d bytes of %d bytes of input (%.1f times)", c.f.peeked, sent, float64(c.f.peeked)/float64(sent))
		}
	}
	t.Run("a pipeline of PINGs", func(t *testing.T) {
		c := newLoopClient(t, s)
		const n = 300000
		in := strings.Repeat("PING\r\n", n)
		c.send(in)
		if c.closed || len(c.f.in) != 0 || c.f.out() != strings.Repeat("+PONG\r\n", n) {
			t.Fatalf("closed %v, %d bytes left, %d bytes of replies", c.closed, len(c.f.in), len(c.f.out()))
		}
		bound(t, c, len(in))
	})
	t.Run("commands longer than the window", func(t *testing.T) {
		c := newLoopClient(t, s)
		// EXISTS of 15,000 keys: 200 KB, three windows.
		args := []string{"EXISTS"}
		for i := 0; i < 15000; i++ {
			args = append(args, fmt.Sprintf("key:%05d", i))
		}
		var in strings.Builder
		for i := 0; i < 20; i++ {
			in.WriteString(respCmd(args...))
			in.WriteString("PING\r\n")
		}
		if in.Len() < 20*3*peekWindow {
			t.Fatalf("commands of %d bytes", in.Len()/20)
		}
		c.send(in.String())
		if got := c.f.out(); c.closed || got != strings.Repeat(":0\r\n+PONG\r\n", 20) {
			t.Fatalf("closed %v, replies %.100q", c.closed, got)
		}
		bound(t, c, in.Len())
	})
	t.Run("a client that never reads", func(t *testing.T) {
		s := loopServer(t, func(c *Config) { c.MaxOutputBytes = 4 << 20 })
		c := newLoopClient(t, s)
		c.f.slow = true
		chunk := strings.Repeat("PING\r\n", 20000)
		sent := 0
		for i := 0; i < 1000 && !c.closed; i++ {
			c.f.in = append(c.f.in, chunk...)
			sent += len(chunk)
			c.pass()
		}
		if !c.closed {
			t.Fatal("a client that never reads its replies was never closed")
		}
		bound(t, c, sent)
	})
}

// TestLoopWindowsKeepReplies: a pipeline of several windows, with commands
// from a few bytes to several windows long, arriving in pieces of any
// size, gets the replies it gets one command at a time.
func TestLoopWindowsKeepReplies(t *testing.T) {
	s := loopServer(t, nil)
	// pipeline is the same commands on keys named with prefix p.
	pipeline := func(p string) []string {
		rng := rand.New(rand.NewPCG(7, 33))
		var cmds []string
		for i, size := 0, 0; size < 12*peekWindow; i++ {
			var c string
			switch rng.IntN(5) {
			case 0:
				c = "PING\r\n"
			case 1:
				c = respCmd("SET", fmt.Sprintf("%s%d", p, i%50), "tok", "PX", "60000", "NX")
			case 2:
				c = respCmd("GET", fmt.Sprintf("%s%d", p, rng.IntN(50)))
			case 3:
				c = respCmd("DEL", fmt.Sprintf("%s%d", p, rng.IntN(50)))
			default:
				args := []string{"EXISTS"}
				for j := rng.IntN(30000); j >= 0; j-- {
					args = append(args, fmt.Sprintf("%s%d", p, j%60))
				}
				c = respCmd(args...)
			}
			cmds = append(cmds, c)
			size += len(c)
		}
		return cmds
	}
	one := newLoopClient(t, s)
	for _, c := range pipeline("a") {
		one.send(c)
		one.settle()
	}
	in := strings.Join(pipeline("b"), "")
	c := newLoopClient(t, s)
	rng := rand.New(rand.NewPCG(1, 2))
	for len(in) > 0 {
		n := min(len(in), 1+rng.IntN(3*peekWindow))
		c.send(in[:n])
		in = in[n:]
	}
	c.settle()
	if c.closed || len(c.f.in) != 0 {
		t.Fatalf("closed %v, %d bytes left", c.closed, len(c.f.in))
	}
	if got, want := c.f.out(), one.f.out(); got != want {
		t.Fatalf("replies differ from one command at a time (%d against %d bytes)", len(got), len(want))
	}
}
