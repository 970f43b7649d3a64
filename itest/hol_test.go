package itest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// send writes commands as one pipeline, without reading.
func (rc *rawConn) send(cmds ...[]string) {
	rc.t.Helper()
	var b strings.Builder
	for _, args := range cmds {
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	_ = rc.c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := rc.c.Write([]byte(b.String())); err != nil {
		rc.t.Fatal(err)
	}
}

// read reads one reply, as do returns it.
func (rc *rawConn) read() string {
	rc.t.Helper()
	_ = rc.c.SetDeadline(time.Now().Add(20 * time.Second))
	line, err := rc.r.ReadString('\n')
	if err != nil {
		return "closed: " + err.Error()
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "$") {
		return line
	}
	n, _ := strconv.Atoi(line[1:])
	if n < 0 {
		return line
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(rc.r, buf); err != nil {
		return "closed: " + err.Error()
	}
	return string(buf[:n])
}

// answered reports whether a reply has arrived, without waiting for one.
func (rc *rawConn) answered() bool {
	if rc.r.Buffered() > 0 {
		return true
	}
	_ = rc.c.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := rc.r.Peek(1)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestConnectionNeverWaitsBehindItself: clients that multiplex callers over
// one connection (ioredis, node-redis, StackExchange.Redis, Lettuce) send a
// caller's unlock or extend behind another caller's acquire that has to
// wait. The later commands run at once, with their replies in order: the
// unlock hands the lock to the acquire queued before it on the same
// connection, and an extend keeps its lock alive while the acquire waits.
// Before, a connection ran nothing while one of its commands waited: the
// acquire waited out its budget behind its own connection's unlock (and
// was refused), and the extend ran after the lock had expired.
func TestConnectionNeverWaitsBehindItself(t *testing.T) {
	for _, fe := range []string{"gnet", "redcon"} {
		for _, memnode := range []bool{false, true} {
			name := fe + "/embedded"
			if memnode {
				name = fe + "/memnode"
			}
			t.Run(name, func(t *testing.T) {
				// A fixed budget: every try waits (with "auto" only a
				// retry does, which node-redlock's would be).
				args := []string{"-frontend", fe, "-acquire-wait", "10s"}
				if memnode {
					args = append(args, "-memnode", testproc.Memnode(t).Addr)
				}
				p := testproc.Proxy(t, args...)

				// One connection: A holds hot; B's acquire queues behind
				// it, and A's unlock comes behind that on the same
				// connection.
				c := dialRaw(t, p.Addr)
				if got := c.do("SET", "hot", "A", "NX", "PX", "10000"); got != "+OK" {
					t.Fatal(got)
				}
				c.send([]string{"SET", "hot", "B", "NX", "PX", "10000"}, []string{"EVAL", casDelete, "1", "hot", "A"})
				if got := c.read(); got != "+OK" {
					t.Fatalf("the acquire queued behind its own connection's unlock: %q, want +OK (handed the lock by that unlock)", got)
				}
				if got := c.read(); got != ":1" {
					t.Fatalf("the unlock: %q, want :1", got)
				}
				if got := c.do("GET", "hot"); got != "B" {
					t.Fatalf("GET hot = %q, want B", got)
				}

				// An extend behind an acquire that waits for another
				// connection's lock keeps its own lock alive meanwhile.
				other := dialRaw(t, p.Addr)
				if got := other.do("SET", "busy", "X", "NX", "PX", "60000"); got != "+OK" {
					t.Fatal(got)
				}
				if got := c.do("SET", "mine", "me", "NX", "PX", "2000"); got != "+OK" {
					t.Fatal(got)
				}
				c.send([]string{"SET", "busy", "me", "NX", "PX", "60000"}, []string{"PING"}, []string{"PEXPIRE", "mine", "60000"})
				extended := false
				for !extended && !c.answered() {
					ms, err := strconv.Atoi(strings.TrimPrefix(other.do("PTTL", "mine"), ":"))
					if err != nil {
						t.Fatal(err)
					}
					extended = ms > 2000
					time.Sleep(5 * time.Millisecond)
				}
				if !extended {
					t.Fatalf("the connection answered before its PEXPIRE behind the waiting acquire took effect: it waited behind itself")
				}
				if got := other.do("EVAL", casDelete, "1", "busy", "X"); got != ":1" {
					t.Fatal(got)
				}
				for i, want := range []string{"+OK", "+PONG", ":1"} {
					if got := c.read(); got != want {
						t.Fatalf("reply %d of the pipeline: %q, want %q", i, got, want)
					}
				}
			})
		}
	}
}
