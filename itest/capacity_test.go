package itest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// heldLimit is how many locks one proxy can hold or wait for at once: a
// lock entry names its queue's tail by a waiter slot of 16 bits on the tail's
// proxy (ShiftLock's TailPtr; rdma.MaxTargets).
const heldLimit = 1 << 16

// TestHeldLocksLimit: an application that holds many locks at once (here
// every one with a 10-minute TTL) reaches the proxy's limit of 65,536 held
// or waited-for locks. Past it an acquire is refused with an error that
// names the limit and what to do about it, leaves the key free, and a
// release makes room again. Before, the client got
// "ERR rdma: inbox full (65536 targets open)", which says neither.
func TestHeldLocksLimit(t *testing.T) {
	eachFrontend(t, func(t *testing.T, fe string) {
		// A try (no wait): a fresh key whose lock entry another key already
		// holds (a hash collision, one in 16 near the limit) answers nil
		// at once instead of waiting out its budget.
		p := testproc.Proxy(t, "-frontend", fe, "-acquire-wait", "0s")
		rc := dialRaw(t, p.Addr)
		var held []string
		next := 0
		fresh := func() string { next++; return fmt.Sprintf("many:%d", next) }
		for len(held) < heldLimit {
			n := min(4096, heldLimit-len(held))
			keys := make([]string, n)
			cmds := make([][]string, n)
			for i := range keys {
				keys[i] = fresh()
				cmds[i] = []string{"SET", keys[i], "t", "NX", "PX", "600000"}
			}
			rc.send(cmds...)
			for _, k := range keys {
				switch got := rc.read(); got {
				case "+OK":
					held = append(held, k)
				case "$-1": // its entry is another key's
				default:
					t.Fatalf("SET %s with %d held: %q", k, len(held), got)
				}
			}
		}
		var refused string
		for i := 0; refused == "" && i < 100; i++ {
			k := fresh()
			switch got := rc.do("SET", k, "t", "NX", "PX", "600000"); {
			case got == "$-1":
			case strings.HasPrefix(got, "-ERR") && strings.Contains(got, "65536 locks") && strings.Contains(got, "more proxies"):
				refused = k
			default:
				t.Fatalf("SET %s with %d held: %q, want an error naming the limit of 65536 locks and what to do", k, len(held), got)
			}
		}
		if refused == "" {
			t.Fatal("100 fresh keys all collided")
		}
		// The same refusal through a script: node-redlock v5's acquire and
		// a plain SET NX in EVAL.
		for _, sc := range []string{redlock5Acquire, `return redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`} {
			if got := rc.do("EVAL", sc, "1", refused, "t", "600000"); !strings.HasPrefix(got, "-ERR") || !strings.Contains(got, "65536 locks") {
				t.Fatalf("EVAL acquire of %s with %d held: %q, want the same error as SET's", refused, len(held), got)
			}
		}
		if got := rc.do("GET", refused); got != "$-1" {
			t.Fatalf("GET %s after its refusal = %q, want nil", refused, got)
		}
		if got := rc.do("DEL", held[0]); got != ":1" {
			t.Fatalf("DEL %s = %q", held[0], got)
		}
		if got := rc.do("SET", held[0], "u", "NX", "PX", "600000"); got != "+OK" {
			t.Fatalf("SET %s after a release made room = %q, want +OK", held[0], got)
		}
	})
}

// redlock5Acquire is node-redlock v5's acquire script.
const redlock5Acquire = `-- Return 0 if an entry already exists.
for i, key in ipairs(KEYS) do
  if redis.call("exists", key) == 1 then
    return 0
  end
end

-- Create an entry for each provided key.
for i, key in ipairs(KEYS) do
  redis.call("set", key, ARGV[1], "PX", ARGV[2])
end

-- Return the number of entries added.
return #KEYS
`

// TestManySharedHoldersOfOneKey: every command on a key looked at each of
// its holders through this proxy, with a clock read for each; one client
// pipelining LOCK.ACQUIRE ... SHARED on one key (56,000 holders after 75
// s, each acquire then taking 4 ms of the event loop) held up every other
// client of the proxy: unrelated SET NX at p99 3 s. A key takes at most
// 1024 shared holders through one proxy; past that the acquire is refused
// at once, with an error that says so.
func TestManySharedHoldersOfOneKey(t *testing.T) {
	p := testproc.Proxy(t)
	rc := dialRaw(t, p.Addr)
	const n = 1500
	cmds := make([][]string, n)
	for i := range cmds {
		cmds[i] = []string{"LOCK.ACQUIRE", "shared", fmt.Sprintf("t%d", i), "SHARED", "PX", "600000"}
	}
	rc.send(cmds...)
	granted, refused := 0, ""
	for i := 0; i < n; i++ {
		got := rc.read()
		switch {
		case strings.HasPrefix(got, ":"):
			granted++
		case strings.HasPrefix(got, "-ERR") && refused == "":
			refused = got
		case strings.HasPrefix(got, "-ERR"):
		default:
			t.Fatalf("shared acquire %d: %q", i, got)
		}
	}
	if granted > 1024 || !strings.Contains(refused, "1024 shared holders") {
		t.Fatalf("%d shared holders of one key granted, first refusal %q: want at most 1024, then an error naming the limit", granted, refused)
	}
}
