package resp

import (
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestIdleLoopLeavesItsP: an event loop with nothing to do waits parked in
// the Go scheduler, not in a system call (third_party/gnet/PATCHED.md,
// issue 33 item 4). A goroutine blocked in epoll_wait keeps its P; with one
// P per loop (procs), every other goroutine of the proxy, among them a
// waiter that a release has just woken and the fabric's readers, which Go's
// netpoller wakes, then waits until sysmon takes the P back, 10-20 ms on a
// quiet process: the hot key's p99. The test looks at where the loop
// goroutines wait (their state in a goroutine dump), not at how long
// anything takes.
func TestIdleLoopLeavesItsP(t *testing.T) {
	s := loopServer(t, func(c *Config) { c.EventLoops = 2 })
	c := dial(t, serve(t, s))
	if _, err := c.Write([]byte(respCmd("PING"))); err != nil {
		t.Fatal(err)
	}
	readReplies(t, c, 1)
	header := regexp.MustCompile(`^goroutine \d+ \[([^\],]+)`)
	var last []string
	for i := 0; i < 500; i++ {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var states []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if !strings.Contains(g, "netpoll.(*Poller).Polling") {
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
	t.Fatalf("idle event loops wait in %q, not parked in Go's netpoller (IO wait): each holds its P", last)
}
