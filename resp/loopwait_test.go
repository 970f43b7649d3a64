package resp

import (
	"bytes"
	"strings"
	"sync"
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

// heldWithBudget is a loop server whose acquires wait 50 ms at most, and
// two of its clients: holder, which holds k, and waiter. configure, if
// set, adds to the server's configuration.
func heldWithBudget(t *testing.T, configure func(*Config)) (s *Server, holder, waiter *loopClient) {
	s = loopServer(t, func(c *Config) {
		c.Wait = lockmap.WaitPolicy{Rules: []lockmap.WaitRule{{Pattern: "*", Wait: 50 * time.Millisecond}}}
		if configure != nil {
			configure(c)
		}
	})
	holder, waiter = newLoopClient(t, s), newLoopClient(t, s)
	holder.do("SET", "k", "holder", "PX", "60000", "NX")
	return s, holder, waiter
}

// TestLoopWaitBudgetEnds: a wait the loop serves still ends with its
// budget: not acquired, nothing left queued, and the lock free once its
// holder lets go.
func TestLoopWaitBudgetEnds(t *testing.T) {
	s, holder, waiter := heldWithBudget(t, nil)
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

// TestLoopAnswersAGrantItMade: a release that hands the lock to a waiter
// on the same loop, while the loop runs the releasing connection's
// callback, has the grant written by that callback, ahead of the release's
// own reply, and wakes nobody (no Conn.Wake). Once the callback is over, a
// grant made elsewhere wakes the connection as before.
func TestLoopAnswersAGrantItMade(t *testing.T) {
	s := loopServer(t, nil)
	tasks := newLoopTasks()
	bell := s.newLoopBell(tasks.add)
	holder, waiter := newLoopClientOn(t, s, bell, tasks), newLoopClientOn(t, s, bell, tasks)
	holder.do("SET", "k", "holder", "PX", "60000", "NX")
	waiter.send(respCmd("SET", "k", "waiter", "PX", "60000", "NX"))
	awaitBlocked(t, s, 1)
	// What the gnet front end does around a callback (OnTraffic).
	bell.busy.Store(true)
	n := len(holder.f.writes)
	var order []string
	holder.f.onWrite = func() { order = append(order, "release reply") }
	waiter.f.onWrite = func() { order = append(order, "grant") }
	holder.send(respCmd("EVAL", casDeleteBody, "1", "k", "holder"))
	s.serveWoken(bell, nil)
	bell.busy.Store(false)
	s.serveWoken(bell, nil)
	if got := string(holder.f.writes[n]); got != ":1\r\n" {
		t.Fatalf("release: %q", got)
	}
	if got := waiter.f.out(); got != "+OK\r\n" {
		t.Fatalf("waiter after the holder's callback: %q", got)
	}
	if strings.Join(order, ", ") != "grant, release reply" {
		t.Fatalf("writes in the order %v, want the grant first", order)
	}
	select {
	case <-waiter.woke:
		t.Fatal("the grant woke its connection, which its loop had answered")
	default:
	}
	// Outside a callback the grant wakes its connection.
	waiter.send(respCmd("SET", "k", "second", "PX", "60000", "NX"))
	awaitBlocked(t, s, 1)
	waiter2 := newLoopClientOn(t, s, bell, tasks)
	if r := waiter2.do("DEL", "k"); r != ":1\r\n" {
		t.Fatalf("DEL: %q", r)
	}
	select {
	case <-waiter.woke:
	default:
		t.Fatal("a grant outside a callback did not wake its connection")
	}
	waiter.settle()
}

// redlockAcquireSHA is node-redlock v4.1-v4.2's acquire script, which the
// proxy knows by its SHA (EVALSHA needs no SCRIPT LOAD).
const redlockAcquireSHA = "e5a322e2634ef59a516e8ea150cb085afafee684"

// TestLoopScriptWaitBudgetEnds: a lock script's acquire that queued on the
// loop ends with its budget (the script answers 0), and leaves nothing
// queued.
func TestLoopScriptWaitBudgetEnds(t *testing.T) {
	s, holder, waiter := heldWithBudget(t, nil)
	start := time.Now()
	if r := waiter.do("EVALSHA", redlockAcquireSHA, "1", "k", "waiter", "60000"); r != ":0\r\n" {
		t.Fatalf("acquire script past its budget: %q", r)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("answered after %v, before the budget's end", d)
	}
	awaitBlocked(t, s, 0)
	if r := holder.do("EVAL", casDeleteBody, "1", "k", "holder"); r != ":1\r\n" {
		t.Fatalf("release: %q", r)
	}
	if r := waiter.do("EVALSHA", redlockAcquireSHA, "1", "k", "waiter", "60000"); r != ":1\r\n" {
		t.Fatalf("acquire script on the free key: %q", r)
	}
}

// TestWaitingCommandCountedOnce: a command that waits (here a lock
// script, whose wait ends on a goroutine) counts once in OnCommand, as
// every other command does: proxy_commands_total counted it at dispatch
// and again when it finished.
func TestWaitingCommandCountedOnce(t *testing.T) {
	var mu sync.Mutex
	counts := map[string]int{}
	s, holder, waiter := heldWithBudget(t, func(c *Config) {
		c.OnCommand = func(name string) {
			mu.Lock()
			counts[name]++
			mu.Unlock()
		}
	})
	if r := waiter.do("EVALSHA", redlockAcquireSHA, "1", "k", "waiter", "60000"); r != ":0\r\n" {
		t.Fatalf("acquire script past its budget: %q", r)
	}
	n := len(waiter.f.writes)
	waiter.send(respCmd("EVALSHA", redlockAcquireSHA, "1", "k", "waiter", "60000"))
	awaitBlocked(t, s, 1)
	holder.do("EVAL", casDeleteBody, "1", "k", "holder")
	waiter.settle()
	if got := string(bytes.Join(waiter.f.writes[n:], nil)); got != ":1\r\n" {
		t.Fatalf("handed over: %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if counts["evalsha"] != 2 {
		t.Fatalf("OnCommand counted evalsha %d times for 2 commands (%v)", counts["evalsha"], counts)
	}
}
