package resp

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/lockmap/maptest"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/resp/scripts"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

var frontends = []string{FrontendGnet, FrontendRedcon}

// serve starts s on a free loopback port.
func serve(t testing.TB, s *Server) string {
	t.Helper()
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s.Addr().String()
}

func dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	return c
}

// readReplies reads until n complete values have arrived.
func readReplies(t testing.TB, c net.Conn, n int) []string {
	t.Helper()
	var buf []byte
	tmp := make([]byte, 64<<10)
	for {
		vals, err := splitReplies(string(buf))
		if err == nil && len(vals) >= n {
			return vals
		}
		m, rerr := c.Read(tmp)
		buf = append(buf, tmp[:m]...)
		if rerr != nil {
			t.Fatalf("after %q: %v", buf, rerr)
		}
	}
}

// TestListenAddrAndClose: Listen on port 0 reports the port it got; a
// second server cannot take it; Close ends every connection.
func TestListenAddrAndClose(t *testing.T) {
	for _, fe := range frontends {
		t.Run(fe, func(t *testing.T) {
			s := loopServer(t, func(c *Config) { c.Frontend = fe })
			addr := serve(t, s)
			if s.Addr().(*net.TCPAddr).Port == 0 {
				t.Fatalf("Addr() = %v", s.Addr())
			}
			c := dial(t, addr)
			if _, err := c.Write([]byte("PING\r\n")); err != nil {
				t.Fatal(err)
			}
			if r := readReplies(t, c, 1); r[0] != "+PONG\r\n" {
				t.Fatalf("PING: %q", r)
			}
			other := loopServer(t, func(c *Config) { c.Frontend = fe })
			if err := other.Listen(addr); err == nil {
				t.Fatal("a second server listens on the same address")
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
				t.Fatalf("read after Close: %v", err)
			}
			select {
			case err := <-s.Done():
				if err != nil {
					t.Fatalf("Done: %v", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("Done never reported")
			}
			if _, err := net.Dial("tcp", addr); err == nil {
				t.Fatal("still accepting after Close")
			}
		})
	}
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "reset") }

// TestUnknownFrontend: a misspelt front end is refused by Listen.
func TestUnknownFrontend(t *testing.T) {
	s := loopServer(t, func(c *Config) { c.Frontend = "epoll" })
	if err := s.Listen("127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), "epoll") {
		t.Fatalf("Listen: %v", err)
	}
}

// TestPipelineOneRead: a pipeline written at once is answered at once: the
// event loop writes a batch's replies with one system call, so the first
// read on loopback gets them all.
func TestPipelineOneRead(t *testing.T) {
	s := loopServer(t, nil)
	c := dial(t, serve(t, s))
	var in, want strings.Builder
	for i := 0; i < 200; i++ {
		in.WriteString(respCmd("ECHO", strings.Repeat("e", i%17)))
		want.WriteString(respCmd("ECHO", strings.Repeat("e", i%17))[len("*2\r\n$4\r\nECHO\r\n"):])
	}
	if _, err := c.Write([]byte(in.String())); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if string(buf[:n]) != want.String() {
		t.Fatalf("first read: %d bytes, want all %d replies (%d bytes) in order", n, 200, want.Len())
	}
}

// TestFrontendsAgree: the same conversation gets byte-identical replies
// from both front ends.
func TestFrontendsAgree(t *testing.T) {
	conv := "PING\r\n" +
		respCmd("GET", "k") + // NOAUTH
		respCmd("AUTH", "wrong") +
		respCmd("AUTH", "pw") +
		respCmd("SET", "k", "t1", "NX", "PX", "60000") +
		respCmd("SET", "k", "t2", "NX") + // held, try-only by policy below
		respCmd("GET", "k") +
		respCmd("EXISTS", "k", "nope") +
		respCmd("SCRIPT", "LOAD", casDeleteBody) +
		respCmd("EVAL", casDeleteBody, "1", "k", "t2") +
		respCmd("EVALSHA", scripts.SHA1Hex(casDeleteBody), "1", "k", "t1") +
		respCmd("EVALSHA", strings.Repeat("0", 40), "0") +
		respCmd("SCRIPT", "EXISTS", scripts.SHA1Hex(casDeleteBody), "abc") +
		respCmd("HELLO", "3", "SETNAME", "me") +
		respCmd("GET", "k") + // RESP3 null
		respCmd("CLIENT", "GETNAME") +
		respCmd("CLIENT", "SETNAME", "a b") +
		respCmd("SELECT", "1") +
		respCmd("HSET", "h", "f", "v") +
		respCmd("GET") +
		respCmd("SET", "k", strings.Repeat("x", 300), "NX") + // MaxValueBytes
		respCmd("LOCK.ACQUIRE", "f", "t", "PX", "1000", "WAIT", "0") +
		respCmd("LOCK.RELEASE", "f", "t") +
		respCmd("COMMAND", "COUNT") +
		respCmd("DBSIZE") +
		"$x y\r\n" + // an inline command that starts with '$'
		"\r\n" +
		respCmd("RESET") +
		respCmd("QUIT") +
		respCmd("PING")
	var outs []string
	for _, fe := range frontends {
		s := loopServer(t, func(c *Config) {
			c.Frontend, c.Password, c.MaxValueBytes = fe, "pw", 256
			c.Wait = lockmap.WaitPolicy{Rules: []lockmap.WaitRule{{Pattern: "*", Wait: 0}}}
		})
		c := dial(t, serve(t, s))
		if _, err := c.Write([]byte(conv)); err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(c) // QUIT closes
		if err != nil {
			t.Fatalf("%s: %v", fe, err)
		}
		if n := len(replies(t, string(out))); n != 28 {
			t.Fatalf("%s: %d replies:\n%q", fe, n, out)
		}
		outs = append(outs, string(out))
	}
	if outs[0] != outs[1] {
		a, b := replies(t, outs[0]), replies(t, outs[1])
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("reply %d differs:\n%s: %q\n%s: %q", i, frontends[0], a[i], frontends[1], b[i])
			}
		}
	}
}

// TestQueuedBehindOverNetwork: on the event loop, with sockets, commands
// pipelined behind a queued SET are answered after it, in order, and a
// client that hangs up while queued gives its place up.
func TestQueuedBehindOverNetwork(t *testing.T) {
	s := loopServer(t, nil)
	addr := serve(t, s)
	holder, waiter, quitter := dial(t, addr), dial(t, addr), dial(t, addr)
	send := func(c net.Conn, in string) {
		t.Helper()
		if _, err := c.Write([]byte(in)); err != nil {
			t.Fatal(err)
		}
	}
	send(holder, respCmd("SET", "n", "holder", "NX", "PX", "60000"))
	readReplies(t, holder, 1)
	send(quitter, respCmd("SET", "n", "quitter", "NX", "PX", "60000"))
	awaitBlocked(t, s, 1)
	send(waiter, respCmd("SET", "n", "waiter", "NX", "PX", "60000")+respCmd("PING")+respCmd("GET", "n"))
	awaitBlocked(t, s, 2)
	quitter.Close()
	awaitBlocked(t, s, 1)
	send(holder, respCmd("DEL", "n"))
	readReplies(t, holder, 1)
	// The GET ran once the SET had queued, while holder held the key, as a
	// GET right after a refused SET NX answers on Redis.
	got := readReplies(t, waiter, 3)
	if strings.Join(got, "") != "+OK\r\n+PONG\r\n$6\r\nholder\r\n" {
		t.Fatalf("waiter: %q", got)
	}
}

// TestNetworkMapDoorbell: with a memory node across the network, the lock
// commands run on the loop with its doorbell: the acquire's and the
// release's atomics go out when the loop rings (the acquire's reply waits
// for its own), only a command that needs another verb (EXISTS on a key
// not held here: a READ) goes to a goroutine, after the release has been
// posted, and replies keep their order.
func TestNetworkMapDoorbell(t *testing.T) {
	m, ep := maptest.Network(t, shiftlock.Config{})
	if m.Inline() {
		t.Fatal("a tcpfab map is inline")
	}
	s := New(Config{Map: m})
	c := dial(t, serve(t, s))
	before := ep.Counters().Snapshot()
	in := respCmd("SET", "k", "t", "NX", "PX", "60000") + "PING\r\n" + respCmd("GET", "k") + respCmd("ECHO", "e") +
		respCmd("EVAL", casDeleteBody, "1", "k", "t") + respCmd("EXISTS", "k")
	if _, err := c.Write([]byte(in)); err != nil {
		t.Fatal(err)
	}
	got := readReplies(t, c, 6)
	if strings.Join(got, "") != "+OK\r\n+PONG\r\n$1\r\nt\r\n$1\r\ne\r\n:1\r\n:0\r\n" {
		t.Fatalf("replies %q", got)
	}
	if n := s.offloaded.Load(); n != 1 {
		t.Fatalf("%d commands ran on a goroutine, want 1 (EXISTS)", n)
	}
	d := ep.Counters().Snapshot().Sub(before)
	if d.OutAtomics() != 2 || d.Out[rdma.VerbRead] != 1 || d.Out[rdma.VerbWrite] != 0 {
		t.Fatalf("verbs %v: want the acquire's and the release's atomics and EXISTS's read", d.Out)
	}
}

// TestEventLoops: several loops serve connections side by side.
func TestEventLoops(t *testing.T) {
	s := loopServer(t, func(c *Config) { c.EventLoops = 3 })
	addr := serve(t, s)
	for i := 0; i < 6; i++ {
		c := dial(t, addr)
		k := strings.Repeat("k", i+1)
		if _, err := c.Write([]byte(respCmd("SET", k, "t", "NX") + respCmd("GET", k))); err != nil {
			t.Fatal(err)
		}
		if got := readReplies(t, c, 2); strings.Join(got, "") != "+OK\r\n$1\r\nt\r\n" {
			t.Fatalf("connection %d: %q", i, got)
		}
	}
	if s.Clients() != 6 {
		t.Fatalf("Clients() = %d", s.Clients())
	}
}

// TestWaitingAcquireEnqueuesOnce: on both front ends over the embedded
// memory node, a SET NX that waits for a holder costs one atomic (the
// enqueue), is handed the lock when the holder lets go, and the commands
// pipelined behind it are answered after it, in order.
func TestWaitingAcquireEnqueuesOnce(t *testing.T) {
	for _, fe := range frontends {
		t.Run(fe, func(t *testing.T) {
			s, ep := loopServerEP(t, func(c *Config) { c.Frontend = fe })
			addr := serve(t, s)
			holder, waiter := dial(t, addr), dial(t, addr)
			send := func(c net.Conn, in string) {
				t.Helper()
				if _, err := c.Write([]byte(in)); err != nil {
					t.Fatal(err)
				}
			}
			// SET NX, and node-redlock v3's lock script (the same, by EVAL):
			// on 4f4a43f the script cost 2 atomics, a try on the loop and the
			// enqueue of its run again on a goroutine.
			for _, acq := range []struct{ name, cmd string }{
				{"SET NX", respCmd("SET", "k", "waiter", "NX", "PX", "60000")},
				{"lock script", respCmd("EVAL", `return redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`, "1", "k", "waiter", "60000")},
			} {
				send(holder, respCmd("SET", "k", "holder", "NX", "PX", "60000"))
				if got := readReplies(t, holder, 1); got[0] != "+OK\r\n" {
					t.Fatalf("holder: %q", got)
				}
				before := ep.Counters().Snapshot()
				send(waiter, acq.cmd+respCmd("PING"))
				awaitBlocked(t, s, 1)
				if d := ep.Counters().Snapshot().Sub(before); d.OutAtomics() != 1 {
					t.Fatalf("a waiting %s cost %d atomics (%v), want 1", acq.name, d.OutAtomics(), d.Out)
				}
				send(holder, respCmd("DEL", "k"))
				readReplies(t, holder, 1)
				if got := readReplies(t, waiter, 2); strings.Join(got, "") != "+OK\r\n+PONG\r\n" {
					t.Fatalf("waiter, %s: %q", acq.name, got)
				}
				send(waiter, respCmd("GET", "k")+respCmd("DEL", "k"))
				if got := readReplies(t, waiter, 2); strings.Join(got, "") != "$6\r\nwaiter\r\n:1\r\n" {
					t.Fatalf("after the handover, %s: %q", acq.name, got)
				}
			}
		})
	}
}

// TestDroppedScriptAcquireReleasesTheLock: a script's acquire queued on the
// loop that the script's run off the loop does not ask for again is
// abandoned: when the holder lets go, the lock passes through it and is
// free for anyone, and it counts no blocked client.
func TestDroppedScriptAcquireReleasesTheLock(t *testing.T) {
	s, _ := loopServerEP(t, nil)
	holder, other := newLoopClient(t, s), newLoopClient(t, s)
	if r := holder.do("SET", "k", "holder", "PX", "60000", "NX"); r != "+OK\r\n" {
		t.Fatalf("holder: %q", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := s.newConnState(ctx, cancel)
	st.loop = s.cfg.Map.Loop(nil)
	// The hook it queued with is the loop's, for a later command's entry:
	// the abandoned wait must not report to it.
	var hooked atomic.Int32
	loopHook := func(ctx context.Context) (context.Context, func()) { hooked.Add(1); return ctx, func() {} }
	opt := lockmap.AcquireOptions{Mode: shiftlock.Exclusive, TTL: time.Minute, Wait: time.Minute, Queue: loopHook}
	_, ok, q, err := st.loop.AcquireOrQueue(st.base, "k", "script", opt)
	if ok || err != nil || q == nil {
		t.Fatalf("a held key on the loop: ok=%v err=%v queued=%v, want queued", ok, err, q != nil)
	}
	st.queued = queuedAcquire{q: q, key: "k", token: "script"}
	if mine, _, _ := st.queued.wait(st, []string{"other"}, "script"); mine || st.queued.q != nil {
		t.Fatalf("a script that asks for another key: mine=%v, still queued=%v; want it dropped", mine, st.queued.q != nil)
	}
	if r := holder.do("DEL", "k"); r != ":1\r\n" {
		t.Fatalf("DEL: %q", r)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := other.do("SET", "k", "other", "PX", "60000", "NX")
		if r == "+OK\r\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dropped acquire kept the lock: SET NX answers %q", r)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.blocked.Load(); n != 0 {
		t.Fatalf("blocked clients %d after the drop, want 0", n)
	}
	if n := hooked.Load(); n != 0 {
		t.Fatalf("the abandoned wait called the loop's queue hook %d times, want 0", n)
	}
}
