package shiftlock

import (
	"context"
	"sync"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// Readers that wait for an epoch flip on the same entry share one poller per
// node: a hot entry under Zipf keys can have dozens of local readers waiting
// at once, and each READ the poller makes answers all of them. Every waiter
// keeps its own condition (the epoch it saw, the RelCnt it saw for leap
// detection); the poller only evaluates them on a shared, fresher read.

type readWaiter struct {
	seq   uint64 // registration order: only reads issued after it may judge it
	epoch uint64
	base  uint64
	res   chan readResult // buffered 1; receives exactly one result
}

type readResult struct {
	e   Entry
	err error
}

type pollShard struct {
	mu sync.Mutex
	m  map[uint64]*entryPoller
}

type entryPoller struct {
	waiters []*readWaiter
	blocker rdma.NodeID
	fresh   bool // a waiter joined since the last read: poll eagerly again
	seq     uint64
}

// waitEpoch registers a reader that saw epoch with RelCnt base, behind the
// writer tail blocker, and returns the channel its result will arrive on.
func (c *Client) waitEpoch(entry, epoch, base uint64, blocker rdma.NodeID) *readWaiter {
	rw := &readWaiter{epoch: epoch, base: base, res: make(chan readResult, 1)}
	s := &c.rpoll[entry%uint64(len(c.rpoll))]
	s.mu.Lock()
	if s.m == nil {
		s.m = map[uint64]*entryPoller{}
	}
	p := s.m[entry]
	start := p == nil
	if start {
		p = &entryPoller{}
		s.m[entry] = p
	}
	p.seq++
	rw.seq = p.seq
	p.waiters = append(p.waiters, rw)
	p.blocker = blocker
	p.fresh = true
	s.mu.Unlock()
	if start {
		go c.pollEpoch(entry, base, blocker)
	}
	return rw
}

// pollEpoch runs until no reader waits on entry any more.
func (c *Client) pollEpoch(entry, base uint64, blocker rdma.NodeID) {
	s := &c.rpoll[entry%uint64(len(c.rpoll))]
	w := c.newWaiter(entry, base, blocker)
	defer w.stop()
	ctx := context.Background()
	iv := c.cfg.PollMin
	for {
		// A waiter that registers while this read is in flight did its FAA
		// after the read was issued: the read says nothing about it.
		s.mu.Lock()
		seen := s.m[entry].seq
		s.mu.Unlock()
		e, err := c.Read(ctx, entry)
		frozen := err == nil && c.holds.frozen(entry) > 0
		s.mu.Lock()
		p := s.m[entry]
		if p.fresh {
			p.fresh = false
			iv = c.cfg.PollMin
		}
		kept := p.waiters[:0]
		for _, rw := range p.waiters {
			switch {
			case rw.seq > seen:
				kept = append(kept, rw)
			case err != nil:
				rw.res <- readResult{err: err}
			case leaped(e.RelCnt(), rw.base):
				rw.res <- readResult{e: e, err: errReset}
			case e.Epoch() != rw.epoch && !frozen:
				rw.res <- readResult{e: e}
			default:
				kept = append(kept, rw)
			}
		}
		if len(kept) < len(p.waiters) {
			iv = c.cfg.PollMin // a phase ended; the next one starts now
		}
		p.waiters = kept
		if len(kept) == 0 {
			delete(s.m, entry)
			s.mu.Unlock()
			return
		}
		w.blocker = p.blocker
		s.mu.Unlock()
		if e.Tail().Node != 0 {
			// The current tail is who the waiting readers depend on: if it
			// is the head and dies, only readers are left to notice.
			w.blocker = e.Tail().Node
		}
		_ = w.observe(e) // progress tracking; leaps are judged per waiter above
		if !time.Now().Before(w.nextCheck) {
			// A successful recovery shows up as a leap on the next read.
			_ = w.check(ctx)
			iv = c.cfg.PollMin
			continue
		}
		_ = w.sleep(ctx, iv)
		if iv *= 2; iv > c.cfg.PollMax {
			iv = c.cfg.PollMax
		}
	}
}
