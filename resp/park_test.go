package resp

import (
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2/pkg/netpoll"

	"github.com/shiftlock/shiftlock-proxy/lockmap/maptest"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// TestIdleLoopLeavesItsP: while a client waits for work that Go's
// netpoller has to wake (here an acquire queued behind a holder on a memory
// node across the network: its answer comes through the fabric's reader),
// an event loop with nothing to do waits parked in the Go scheduler, not in
// a system call (third_party/gnet/PATCHED.md, resp/park.go; issue 33 item
// 4). A goroutine blocked in epoll_wait keeps its P; with one P per loop
// (procs), every other goroutine of the proxy, among them the fabric's
// readers, then waits until sysmon takes the P back, 10-20 ms on a quiet
// process: the hot key's p99. The test looks at where the loop goroutines
// wait (their state in a goroutine dump), not at how long anything takes.
func TestIdleLoopLeavesItsP(t *testing.T) {
	m, _ := maptest.Network(t, shiftlock.Config{})
	s := loopServer(t, func(c *Config) { c.EventLoops, c.Map = 1, m })
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

// TestIdleWait: an idle loop parks only for work that Go's netpoller may
// have to wake. Acquires queued on an in-process memory node are woken by a
// release on a loop, which leaves the waiter on that loop's run queue, or by
// a timer: the loop blocks for idleTick at most, without the trip through
// Go's netpoller that cost the contended bank 12-24% of the proxy's CPU.
func TestIdleWait(t *testing.T) {
	for _, tc := range []struct {
		off, inline int64
		want        int
	}{
		{0, 0, netpoll.WaitBlock},
		{0, 3, idleTick},
		{1, 0, netpoll.WaitPark},
		{2, 5, netpoll.WaitPark},
	} {
		if got := idleWait(tc.off, tc.inline); got != tc.want {
			t.Errorf("off the loop %d, queued inline %d: idle wait %d, want %d", tc.off, tc.inline, got, tc.want)
		}
	}
}
