package resp

import (
	"fmt"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/resp/scripts"
)

// sinkConn is a connection for benchmarks: it keeps the last write in a
// reused buffer, so that the benchmark itself allocates nothing.
type sinkConn struct {
	in     []byte
	last   []byte
	writes int
}

func (c *sinkConn) Peek(n int) ([]byte, error) {
	if n <= 0 || n > len(c.in) {
		return c.in, nil
	}
	return c.in[:n], nil
}
func (c *sinkConn) Discard(n int) (int, error) { c.in = c.in[n:]; return n, nil }
func (c *sinkConn) InboundBuffered() int       { return len(c.in) }
func (c *sinkConn) OutboundBuffered() int      { return 0 }
func (c *sinkConn) Write(p []byte) (int, error) {
	c.last = append(c.last[:0], p...)
	c.writes++
	return len(p), nil
}

// benchLoop runs one batch per iteration through the event loop's
// onTraffic: input i%len(inputs) arrives, and its replies must be want[i].
func benchLoop(b *testing.B, s *Server, inputs, want []string) {
	lc := s.newLoopConn(func() { b.Fatal("a command went to a goroutine") }, s.newLoopBell(func(f func()) { f() }))
	b.Cleanup(func() { s.closeLoopConn(lc) })
	var c sinkConn
	raw := make([][]byte, len(inputs))
	for i := range inputs {
		raw[i] = []byte(inputs[i])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % len(raw)
		c.in = raw[k]
		if s.onTraffic(lc, &c) || lc.busy() {
			b.Fatal("closed or waiting")
		}
		if string(c.last) != want[k] {
			b.Fatalf("replies %q, want %q", c.last, want[k])
		}
	}
}

// BenchmarkLoopSetRelease is the event loop's work for one acquire-release
// cycle of the distinct-keys workload, as go-redis sends it: SET NX PX and
// the compare-and-delete EVALSHA arrive together (one read), are parsed,
// run on the loop against an embedded lock table, and answered with one
// write. Compare BenchmarkSetRelease (the same commands through exec
// alone) and lockmap's BenchmarkCycle (the lock table alone) for what the
// front end adds; -benchmem shows its allocations, which are lockmap's and
// the keys and tokens it keeps.
func BenchmarkLoopSetRelease(b *testing.B) {
	s, sha := casDeleteServer(b)
	var in, want []string
	for i := 0; i < 64; i++ {
		k := fmt.Sprintf("tput:%c", 'A'+i)
		in = append(in, respCmd("set", k, "tok", "px", "10000", "nx")+respCmd("evalsha", sha, "1", k, "tok"))
		want = append(want, "+OK\r\n:1\r\n")
	}
	benchLoop(b, s, in, want)
}

// BenchmarkLoopPipeline is the front end alone on a batch of commands that
// do not touch the lock table: parsing, dispatch and reply encoding, which
// must not allocate. (Inline commands, "PING\r\n" as typed into telnet,
// do: redcon's inline parser builds new slices. Clients send arrays.)
func BenchmarkLoopPipeline(b *testing.B) {
	s := loopServer(b, nil)
	in := respCmd("PING") + respCmd("echo", "hello") + respCmd("SELECT", "0") + respCmd("ping", "x")
	benchLoop(b, s, []string{in}, []string{"+PONG\r\n$5\r\nhello\r\n+OK\r\n$1\r\nx\r\n"})
}

// TestLoopSetReleaseAllocs keeps the distinct-keys cycle's allocations to
// what it must keep or hand on: the grant, its slot in the owner table, the
// hold, the key and token the hold keeps, and the script's key list. A
// reply closure built for every acquire, needed only by one that queues,
// cost a sixth (before 2026-11-28).
func TestLoopSetReleaseAllocs(t *testing.T) {
	s, sha := casDeleteServer(t)
	lc := s.newLoopConn(func() { t.Fatal("a command went to a goroutine") }, s.newLoopBell(func(f func()) { f() }))
	defer s.closeLoopConn(lc)
	in := []byte(respCmd("set", "k", "tok", "px", "10000", "nx") + respCmd("evalsha", sha, "1", "k", "tok"))
	var sc sinkConn
	allocs := testing.AllocsPerRun(1000, func() {
		sc.in = in
		if s.onTraffic(lc, &sc) || lc.busy() || string(sc.last) != "+OK\r\n:1\r\n" {
			t.Fatalf("closed, waiting or replied %q", sc.last)
		}
	})
	if allocs > 5 {
		t.Errorf("one SET NX PX and compare-and-delete cycle allocates %v times, want at most 5", allocs)
	}
}

// casDeleteServer is a loop server with the compare-and-delete script
// loaded, as go-redis leaves it after its first NOSCRIPT; sha is the
// script's.
func casDeleteServer(t testing.TB) (s *Server, sha string) {
	s = loopServer(t, nil)
	sha = scripts.SHA1Hex(casDeleteBody)
	if r := newLoopClient(t, s).do("SCRIPT", "LOAD", casDeleteBody); r != "$40\r\n"+sha+"\r\n" {
		t.Fatalf("SCRIPT LOAD: %q", r)
	}
	return s, sha
}
