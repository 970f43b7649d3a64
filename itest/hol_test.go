package itest

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

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
	eachFrontend(t, func(t *testing.T, fe string) {
		for _, memnode := range []bool{false, true} {
			name := "embedded"
			if memnode {
				name = "memnode"
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
	})
}
