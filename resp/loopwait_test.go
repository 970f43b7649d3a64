package resp

import (
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
)

// TestLoopTakesTheHandover: a SET NX queued behind a holder is answered by
// its connection's loop when the release hands the lock over: the release
// wakes the connection at once, one pass answers it, and no goroutine
// waited for it.
func TestLoopTakesTheHandover(t *testing.T) {
	s := loopServer(t, nil)
	holder, waiter := newLoopClient(t, s), newLoopClient(t, s)
	holder.do("SET", "k", "holder", "PX", "60000", "NX")
	waiter.send(respCmd("SET", "k", "waiter", "PX", "60000", "NX") + respCmd("PING"))
	awaitBlocked(t, s, 1)
	if r := holder.do("EVAL", casDeleteBody, "1", "k", "holder"); r != ":1\r\n" {
		t.Fatalf("release: %q", r)
	}
	select {
	case <-waiter.woke:
	default:
		t.Fatal("the release did not wake the waiting connection")
	}
	waiter.pass()
	if got := waiter.f.out(); got != "+OK\r\n+PONG\r\n" {
		t.Fatalf("waiter after one pass: %q", got)
	}
	if g, off := s.loopGrants.Load(), s.loopWaitsOff.Load(); g != 1 || off != 0 {
		t.Fatalf("answered on the loop %d, on a goroutine %d; want 1 and 0", g, off)
	}
	if r := holder.do("GET", "k"); r != "$6\r\nwaiter\r\n" {
		t.Fatalf("GET after the handover: %q", r)
	}
	awaitBlocked(t, s, 0)
}

// TestLoopHandsOverToItsOwnConnection: one connection shared by two
// callers (ioredis, node-redis): the second caller's SET NX queues behind
// the first's lock, and the first's unlock, behind it on the same
// connection, lets it through; the replies stay in order.
func TestLoopHandsOverToItsOwnConnection(t *testing.T) {
	s := loopServer(t, nil)
	c := newLoopClient(t, s)
	c.send(respCmd("SET", "k", "a", "PX", "60000", "NX") +
		respCmd("SET", "k", "b", "PX", "60000", "NX") +
		respCmd("EVAL", casDeleteBody, "1", "k", "a") +
		respCmd("GET", "k"))
	c.settle()
	if got, want := c.f.out(), "+OK\r\n+OK\r\n:1\r\n$1\r\nb\r\n"; got != want {
		t.Fatalf("replies %q, want %q", got, want)
	}
	if g := s.loopGrants.Load(); g != 1 {
		t.Fatalf("answered on the loop %d, want 1", g)
	}
}

// TestLoopWaitBudgetEnds: a wait the loop serves still ends with its
// budget: not acquired, nothing left queued, and the lock free once its
// holder lets go.
func TestLoopWaitBudgetEnds(t *testing.T) {
	s := loopServer(t, func(c *Config) {
		c.Wait = lockmap.WaitPolicy{Rules: []lockmap.WaitRule{{Pattern: "*", Wait: 50 * time.Millisecond}}}
	})
	holder, waiter := newLoopClient(t, s), newLoopClient(t, s)
	holder.do("SET", "k", "holder", "PX", "60000", "NX")
	start := time.Now()
	if r := waiter.do("SET", "k", "waiter", "PX", "60000", "NX"); r != "$-1\r\n" {
		t.Fatalf("SET past its budget: %q", r)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("answered after %v, before its 50 ms budget", d)
	}
	if off := s.loopWaitsOff.Load(); off != 1 {
		t.Fatalf("waits handed to a goroutine: %d, want 1 (the budget's end)", off)
	}
	awaitBlocked(t, s, 0)
	if r := holder.do("GET", "k"); r != "$6\r\nholder\r\n" {
		t.Fatalf("GET while held: %q", r)
	}
	holder.do("DEL", "k")
	for end := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		if r := waiter.do("SET", "k", "again", "PX", "60000", "NX"); r == "+OK\r\n" {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the abandoned wait kept the lock")
		}
	}
}
