package resp

import (
	"sync/atomic"

	"github.com/panjf2000/gnet/v2/pkg/netpoll"
)

// offLoop counts the work that the event loops' clients wait for, that
// runs off the loops and that Go's netpoller may have to wake: commands on
// goroutines of their own (goWait), deferred acquires over the network
// (Map.AcquireAsync), doorbell batches whose memory node has not
// answered within the loop's patience (loopBell.track), and an open TLS
// port (ListenTLS), whose connections are goroutines.
//
// While it is not zero, an idle event loop waits parked in Go's netpoller
// instead of blocking in epoll_wait (third_party/gnet/PATCHED.md). A loop
// blocked in the system call keeps its P, and with one P per loop (procs)
// the goroutines doing that work, and the fabric's readers that Go's
// netpoller would wake for them, wait until sysmon takes the P back: 10-20
// ms (issue 33 item 4: the hot key's p99). Parking costs a trip through Go's
// netpoller on every wake-up, about 14 µs of CPU per request for a client
// that sends one command at a time.
var offLoop atomic.Int64

// queuedInline counts the acquires queued on an in-process memory node
// (acquireInline). What wakes one is a release, run on an event loop, which
// puts the waiter on that loop's P's run queue, or a timer (its budget, its
// holder's lease). Neither needs Go's netpoller, so a loop need not park for
// them: it yields its P once more before it blocks, and blocks for idleTick
// at most, the lateness a timer of its P can suffer. Parking for them cost
// the contended bank 12-24% of the proxy's CPU
// (docs/notes/2026-11-28-parking.md).
var queuedInline atomic.Int64

// idleTick is how long, in milliseconds, an idle loop blocks in epoll_wait
// while only queuedInline counts.
const idleTick = 1

// idleWait is how an idle loop waits (netpoll.IdleWait) while off is
// counted off the loops and inline acquires are queued.
func idleWait(off, inline int64) int {
	switch {
	case off > 0:
		return netpoll.WaitPark
	case inline > 0:
		return idleTick
	}
	return netpoll.WaitBlock
}

func init() {
	netpoll.IdleWait = func() int { return idleWait(offLoop.Load(), queuedInline.Load()) }
}
