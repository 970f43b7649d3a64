package resp

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"regexp"
	"runtime"
	"strconv"
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
	if last, ok := loopsPark(t); !ok {
		t.Fatalf("idle event loops wait in %q while a client waits off the loop, not parked in Go's netpoller (IO wait): each holds its P", last)
	}
}

// TestIdleLoopParksWhileTLSIsServed: the TLS port runs on goroutines (the
// redcon front end: an accept loop and one goroutine per connection), which
// Go's netpoller wakes. While it is open, an idle event loop must not hold
// its P in epoll_wait: a TLS client's PING waited 9-21 ms for sysmon while
// a plain client kept the loop busy (docs/notes/2026-11-28-limits.md).
func TestIdleLoopParksWhileTLSIsServed(t *testing.T) {
	s := loopServer(t, func(c *Config) { c.EventLoops = 1 })
	serve(t, s)
	if err := s.ListenTLS("127.0.0.1:0", &tls.Config{}); err != nil {
		t.Fatal(err)
	}
	if last, ok := loopsPark(t); !ok {
		t.Fatalf("idle event loops wait in %q while the TLS port is served, not parked in Go's netpoller (IO wait)", last)
	}
}

// loopsPark waits up to a second for every event loop goroutine to wait
// parked in Go's netpoller ("IO wait" in a goroutine dump), and returns
// the states it saw last if they do not.
func loopsPark(t *testing.T) ([]string, bool) {
	t.Helper()
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
		if len(states) == 0 { // a running goroutine has no stack in the dump
			last = []string{"not in the dump"}
			time.Sleep(2 * time.Millisecond)
			continue
		}
		parked := 0
		for _, st := range states {
			if st == "IO wait" {
				parked++
			}
		}
		if parked == len(states) {
			return nil, true
		}
		last = states
		time.Sleep(2 * time.Millisecond) // let the loops settle; idle, they stay where they wait
	}
	return last, false
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

// TestEventLoopsWatchTheListener: the proxy accepts on a goroutine of its
// own, which Go's netpoller wakes. An idle event loop blocked in
// epoll_wait keeps its P, and with one P per loop (procs) a new connection
// waited for sysmon to take the P back before anything accepted it: 15-21
// ms now and then for a client that dials an idle proxy, against under 1
// ms for redis-server (docs/notes/2026-11-28-limits.md, section 6; a
// 5 ms redislock Obtain missed its deadline in CI). So every event loop
// watches the listener too, and parks once when it becomes readable
// (netpoll.Poller.AddParkOnReadable). Like TestIdleLoopLeavesItsP, the
// test looks at where things wait, not at how long anything takes: the
// listening socket must be in Go's netpoller's epoll set and in every
// loop's.
func TestEventLoopsWatchTheListener(t *testing.T) {
	const loops = 2
	s := loopServer(t, func(c *Config) { c.EventLoops = loops })
	addr := serve(t, s)
	ino := listenerInode(t, addr)
	if n := epollsWatching(t, ino); n != 1+loops {
		t.Fatalf("the listening socket is in %d epoll sets, want %d: Go's netpoller's and one per event loop", n, 1+loops)
	}
	c := dial(t, addr)
	if _, err := c.Write([]byte(respCmd("PING"))); err != nil {
		t.Fatal(err)
	}
	if got := readReplies(t, c, 1); got[0] != "+PONG\r\n" {
		t.Fatalf("PING: %q", got)
	}
}

// listenerInode finds the inode of the socket listening on addr (an IPv4
// loopback address) in /proc/net/tcp.
func listenerInode(t *testing.T, addr string) uint64 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skipf("no /proc/net/tcp: %v", err)
	}
	local := fmt.Sprintf("0100007F:%04X", p)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == local && f[3] == "0A" { // 0A: LISTEN
			ino, err := strconv.ParseUint(f[9], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return ino
		}
	}
	t.Fatalf("no listening socket on %s in /proc/net/tcp", addr)
	return 0
}

// epollsWatching counts this process's epoll instances whose interest list
// holds the file with inode ino (/proc/self/fdinfo lists each watched
// descriptor with its inode in hex).
func epollsWatching(t *testing.T, ino uint64) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	want := fmt.Sprintf(" ino:%x ", ino)
	n := 0
	for _, fd := range fds {
		if link, err := os.Readlink("/proc/self/fd/" + fd.Name()); err != nil || link != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + fd.Name())
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(info), "\n") {
			if strings.HasPrefix(line, "tfd:") && strings.Contains(line+" ", want) {
				n++
				break
			}
		}
	}
	return n
}
