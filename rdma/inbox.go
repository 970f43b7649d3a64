package rdma

import (
	"fmt"
	"sync"
)

// Inbox demultiplexes a node's Sends to per-target queues: the receive side
// of a waiter slot. Open allocates a Target with its own queue; Deliver, used
// as an Endpoint's Bind handler, routes by Target and never blocks.
//
// A Target packs a 16-bit slot index with an 8-bit generation, so a message
// that arrives after its slot was closed and reopened is refused rather than
// delivered to the wrong waiter.
type Inbox struct {
	mu    sync.RWMutex
	slots []*inboxSlot
	free  []uint32
}

type inboxSlot struct {
	gen  uint32
	open bool
	ch   chan Message
	// notify, if set, is told of each message queued (Notify).
	notify func(Message)
}

const inboxDepth = 8 // a waiter receives at most a Successor and a Handover per grant

// MaxTargets is how many targets an Inbox holds open at once: a Target's
// slot index has 16 bits, because ShiftLock's lock entry names a queue's
// tail by its node and a 24-bit target (DctQpNum in the paper's Fig. 3),
// of which 8 bits are the generation.
const MaxTargets = 1 << 16

// ErrInboxFull: Open found MaxTargets targets open.
var ErrInboxFull = fmt.Errorf("rdma: inbox full (%d targets open)", MaxTargets)

// Open allocates a target and returns it with its receive queue.
func (ib *Inbox) Open() (Target, <-chan Message, error) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	var idx uint32
	if n := len(ib.free); n > 0 {
		idx = ib.free[n-1]
		ib.free = ib.free[:n-1]
	} else {
		if len(ib.slots) >= MaxTargets {
			return 0, nil, ErrInboxFull
		}
		idx = uint32(len(ib.slots))
		ib.slots = append(ib.slots, &inboxSlot{ch: make(chan Message, inboxDepth)})
	}
	s := ib.slots[idx]
	s.gen = s.gen%255 + 1 // generations 1..255
	s.open = true
	return Target(s.gen<<16 | idx), s.ch, nil
}

// Close releases t. Messages still queued for it are discarded.
func (ib *Inbox) Close(t Target) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	s := ib.lookup(t)
	if s == nil {
		return
	}
	s.open = false
	s.notify = nil
	for {
		select {
		case <-s.ch:
		default:
			ib.free = append(ib.free, uint32(t)&0xffff)
			return
		}
	}
}

func (ib *Inbox) lookup(t Target) *inboxSlot {
	idx := uint32(t) & 0xffff
	if int(idx) >= len(ib.slots) {
		return nil
	}
	s := ib.slots[idx]
	if !s.open || s.gen != uint32(t)>>16 {
		return nil
	}
	return s
}

// Notify has f told of every message queued for t from now on, once it is
// in t's queue, on the goroutine that delivered it; nil stops that. It is
// for a receiver that does not block on the queue (an event loop): f
// schedules it to look, and must not block itself. It reports whether t is
// open.
func (ib *Inbox) Notify(t Target, f func(Message)) bool {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	s := ib.lookup(t)
	if s == nil {
		return false
	}
	s.notify = f
	return true
}

// Deliver queues m for its target. It fails with ErrNotReady when the target
// is not open or its queue is full, which the sender sees as a failed Send.
func (ib *Inbox) Deliver(m Message) error {
	ib.mu.RLock()
	s := ib.lookup(m.To)
	if s == nil {
		ib.mu.RUnlock()
		return fmt.Errorf("%w: target %#x is not open", ErrNotReady, m.To)
	}
	select {
	case s.ch <- m:
	default:
		ib.mu.RUnlock()
		return fmt.Errorf("%w: target %#x queue full", ErrNotReady, m.To)
	}
	notify := s.notify
	ib.mu.RUnlock()
	if notify != nil {
		// Outside the lock: f may take the receiver's own locks, which
		// may be held around an Open or a Close.
		notify(m)
	}
	return nil
}
