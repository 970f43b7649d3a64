package itest

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestBadInputGetsErrorsNotCrashes sends the proxy process malformed and
// hostile input on raw connections. Each gets an error reply (and, for a
// broken stream, a closed connection); the proxy keeps serving everyone else.
func TestBadInputGetsErrorsNotCrashes(t *testing.T) {
	p := testproc.Proxy(t)
	good := client(t, p.Addr)
	ctx := ctxT(t, time.Minute)
	if err := good.SetNX(ctx, "survivor", "me", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, send, wantPrefix string
		closes                 bool
	}{
		{"huge multibulk count", "*3000000000\r\n", "-ERR protocol error", true},
		{"huge bulk length", "*2\r\n$3\r\nGET\r\n$999999999999\r\n", "-ERR protocol error", true},
		{"not RESP after a count", "*1\r\n+PING\r\n", "-ERR protocol error", true},
		{"binary garbage", "*\x00\xff\xfe\r\n", "-ERR protocol error", true},
		{"oversized command", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000000\r\n" + strings.Repeat("x", 1100000), "-ERR", true},
		{"oversized token", "*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$70000\r\n" + strings.Repeat("t", 70000) + "\r\n$2\r\nNX\r\n", "-ERR argument of 70000 bytes is too large", false},
		{"unknown command", "*2\r\n$4\r\nHSET\r\n$1\r\nh\r\n", "-ERR unknown command 'hset'", false},
		{"wrong arity", "*1\r\n$3\r\nGET\r\n", "-ERR wrong number of arguments for 'get' command", false},
		{"bad TTL", "*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nPX\r\n$2\r\n-5\r\n", "-ERR invalid expire time in 'set' command", false},
		{"unsupported script", "*3\r\n$4\r\nEVAL\r\n$19\r\nreturn redis.call()\r\n$1\r\n0\r\n", "-ERR", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", p.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			go conn.Write([]byte(c.send))
			line, err := bufio.NewReader(conn).ReadString('\n')
			if err != nil {
				t.Fatalf("no reply: %v", err)
			}
			if !strings.HasPrefix(line, c.wantPrefix) {
				t.Fatalf("reply %q, want prefix %q", line, c.wantPrefix)
			}
			if c.closes {
				_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := conn.Read(make([]byte, 1)); err == nil {
					t.Fatal("connection left open after a broken stream")
				}
			}
		})
	}
	if p.Exited() {
		t.Fatalf("proxy died:\n%s", p.Output())
	}
	if v, err := good.Get(ctx, "survivor").Result(); v != "me" || err != nil {
		t.Fatalf("other client after the bad input: %q %v", v, err)
	}
}

// TestBadInputBehindAWaitingAcquire: a client pipelines an acquire that
// gets its lock at once, one that waits in a lock's queue, another that
// gets its lock at once, then bad input. As Redis answers everything it
// ran before bad input, the proxy answers all three, the waiting one once
// it is handed its lock, then the error, and closes; on both front ends.
// Before, the error went out at once and the connection closed: the
// replies of the commands behind the waiting one were dropped (one had
// granted a lock its client was never told of, held until its TTL), and
// the waiting one was abandoned.
func TestBadInputBehindAWaitingAcquire(t *testing.T) {
	eachFrontend(t, func(t *testing.T, fe string) {
		p := testproc.Proxy(t, "-frontend", fe, "-acquire-wait", "30s")
		holder, c := dialRaw(t, p.Addr), dialRaw(t, p.Addr)
		if got := holder.do("SET", "w", "holder", "NX", "PX", "60000"); got != "+OK" {
			t.Fatalf("holder: %q", got)
		}
		if err := c.write(respCmd("SET", "a", "c", "NX", "PX", "60000") + respCmd("SET", "w", "c", "NX", "PX", "60000") +
			respCmd("SET", "b", "c", "NX", "PX", "60000")); err != nil {
			t.Fatal(err)
		}
		if got := c.read(); got != "+OK" {
			t.Fatalf("SET a: %q", got)
		}
		// Bad input in a read of its own: in the same read as the
		// commands, the framing guard refuses the whole read before any
		// of it runs.
		time.Sleep(100 * time.Millisecond)
		if err := c.write("*1\r\n+PING\r\n"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if got := holder.do("DEL", "w"); got != ":1" {
			t.Fatalf("holder's DEL: %q", got)
		}
		for _, want := range []string{"+OK", "+OK"} {
			if got := c.read(); got != want {
				t.Fatalf("after the holder let go: %q, want %q", got, want)
			}
		}
		if got := c.read(); !strings.HasPrefix(got, "-ERR protocol error") {
			t.Fatalf("after the replies: %q, want the protocol error", got)
		}
		if got := c.read(); !strings.HasPrefix(got, "closed") {
			t.Fatalf("after the error: %q, want the connection closed", got)
		}
		// What it was told it holds, it holds.
		for _, k := range []string{"a", "w", "b"} {
			if got := holder.do("GET", k); got != "c" {
				t.Errorf("GET %s = %q, want c", k, got)
			}
		}
	})
}
