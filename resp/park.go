package resp

import (
	"sync/atomic"

	"github.com/panjf2000/gnet/v2/pkg/netpoll"
)

// offLoop counts the work that the event loops' clients wait for and that
// runs off the loops: commands on goroutines of their own (goWait),
// deferred acquires (Map.AcquireAsync) and doorbell batches whose memory
// node has not answered within the loop's patience (loopBell.track).
//
// While it is not zero, an idle event loop waits parked in Go's netpoller
// instead of blocking in epoll_wait (third_party/gnet/PATCHED.md). A loop
// blocked in the system call keeps its P, and with one P per loop (procs)
// the goroutines doing that work, and the fabric's readers that Go's
// netpoller would wake for them, wait until sysmon takes the P back: 10-20
// ms (issue 33 item 4: the hot key's p99). Parking costs a trip through Go's
// netpoller on every wake-up, about 14 µs of CPU per request for a client
// that sends one command at a time, so an idle loop with nothing off the
// loop still blocks in epoll_wait: nothing else then needs its P.
var offLoop atomic.Int64

func init() { netpoll.ParkWhen = func() bool { return offLoop.Load() > 0 } }
