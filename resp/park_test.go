package resp

import (
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestIdleLoopLeavesItsP: while a client waits for work off the event
// loops (here an acquire queued behind a holder, on a goroutine of its
// own), an event loop with nothing to do waits parked in the Go scheduler,
// not in a system call (third_party/gnet/PATCHED.md, resp/park.go; issue 33
// item 4). A goroutine blocked in epoll_wait keeps its P; with one P per
// loop (procs), every other goroutine of the proxy, among them the waiter
// that a release wakes and the fabric's readers, which Go's netpoller
// wakes, then waits until sysmon takes the P back, 10-20 ms on a quiet
// process: the hot key's p99. The test looks at where the loop goroutines
// wait (their state in a goroutine dump), not at how long anything takes.
func TestIdleLoopLeavesItsP(t *testing.T) {
	s := loopServer(t, func(c *Config) { c.EventLoops = 1 })
	addr := serve(t, s)
	holder, waiter := dial(t, addr), dial(t, addr)
	if _, err := holder.Write([]byte(respCmd("SET", "k", "a", "NX", "PX", "60000"))); err != nil {
		t.Fatal(err)
	}
	if got := readReplies(t, holder, 1); got[0] != "+OK\r\n" {
		t.Fatalf("holder: %q", got)
	}
	if _, err := waiter.Write([]byte(respCmd("SET", "k", "b", "NX", "PX", "60000"))); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = holder.Write([]byte(respCmd("DEL", "k")))
		readReplies(t, waiter, 1)
	}()
	for s.blocked.Load() == 0 { // the waiter's acquire is queued, on its goroutine
		time.Sleep(time.Millisecond)
	}
	header := regexp.MustCompile(`^goroutine \d+ \[([^\],]+)`)
	var last []string
	for i := 0; i < 500; i++ {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var states []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			// gnet's main reactor (rotate) accepts nothing here (the
			// proxy accepts on a goroutine of its own): it blocked once,
			// long before, and sysmon took its P back then.
			if !strings.Contains(g, "netpoll.(*Poller).Polling") || strings.Contains(g, "(*eventloop).rotate") {
				continue
			}
			if m := header.FindStringSubmatch(g); m != nil {
				states = append(states, m[1])
			}
		}
		if len(states) == 0 {
			t.Fatal("no event loop goroutine in the dump")
		}
		parked := 0
		for _, st := range states {
			if st == "IO wait" {
				parked++
			}
		}
		if parked == len(states) {
			return
		}
		last = states
		time.Sleep(2 * time.Millisecond) // let the loops settle; idle, they stay where they wait
	}
	t.Fatalf("idle event loops wait in %q while a client waits off the loop, not parked in Go's netpoller (IO wait): each holds its P", last)
}
