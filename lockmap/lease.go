package lockmap

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// ErrNoLease means the proxy cannot prove to its memory node that it is alive,
// so it must not grant, extend, or trust the locks it holds there.
var ErrNoLease = errors.New("lockmap: no lease with the memory node")

// Lease is a proxy's liveness with one memory node (DESIGN §4). It heartbeats
// into the node table and publishes a lease horizon: a bound on when every
// grant this proxy made there ends. The memory node will not recover an entry
// a dead proxy may hold until that horizon has passed, so a grant is only
// made once the published horizon covers its deadline.
type Lease struct {
	ep        rdma.Endpoint
	hb        *rdma.Heartbeat
	deadAfter time.Duration
	selfFence time.Duration

	mu      sync.Mutex
	maxEnd  time.Time     // latest deadline of a grant made under this lease
	headTTL time.Duration // longest TTL granted lately: publish room for the next one
	headAt  time.Time
	lost    error
}

// NewLease starts heartbeating on ep.
func NewLease(ep rdma.Endpoint) *Lease {
	l := ep.Layout()
	ls := &Lease{deadAfter: l.DeadAfter, selfFence: l.DeadAfter / 2}
	ls.hb = rdma.StartHeartbeat(ep, ls.horizon, func(err error) {
		ls.mu.Lock()
		ls.lost = err
		ls.mu.Unlock()
	})
	ls.ep = ep
	return ls
}

// Dead reports why this membership can never be valid again, or nil: the
// memory node declared us dead (fenced), or it is gone (a TCP endpoint never
// reconnects), or it has not acknowledged a beat for DeadAfter, after which
// it has surely declared us dead. The proxy then rejoins under a new NodeID.
func (ls *Lease) Dead() error {
	ls.mu.Lock()
	lost := ls.lost
	ls.mu.Unlock()
	if lost != nil {
		return lost
	}
	if ls.hb.Fenced() {
		return rdma.ErrFenced
	}
	if since := time.Since(ls.hb.LastAck()); since > ls.deadAfter {
		return fmt.Errorf("%w: no heartbeat acknowledged for %v", rdma.ErrUnreachable, since.Round(time.Millisecond))
	}
	return nil
}

// horizon is what each beat publishes: room for every grant made so far and
// for the next one of the longest recent TTL, and never less than DeadAfter,
// which bounds locks without a TTL (they die with the proxy's membership).
func (ls *Lease) horizon() time.Duration {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	h := time.Until(ls.maxEnd)
	if time.Since(ls.headAt) > time.Minute {
		ls.headTTL = 0 // a long TTL used once should not slow recovery forever
	}
	if ls.headTTL > h {
		h = ls.headTTL
	}
	if h < ls.deadAfter {
		h = ls.deadAfter
	}
	return h + ls.deadAfter/4
}

// Valid reports whether grants under this lease can still be trusted: the
// memory node has heard from us recently enough that it cannot have declared
// us dead. Past selfFence (half of DeadAfter) without an acknowledged beat,
// the proxy fences itself.
func (ls *Lease) Valid() error {
	ls.mu.Lock()
	lost := ls.lost
	ls.mu.Unlock()
	if lost != nil {
		return fmt.Errorf("%w: %w", ErrNoLease, lost)
	}
	if since := time.Since(ls.hb.LastAck()); since > ls.selfFence {
		return fmt.Errorf("%w: last heartbeat acknowledged %v ago", ErrNoLease, since.Round(time.Millisecond))
	}
	return nil
}

// Cover makes sure a grant ending at end (zero: no TTL) is inside the
// published horizon, pushing a heartbeat first if it is not.
func (ls *Lease) Cover(ctx context.Context, end time.Time, ttl time.Duration) error {
	if err := ls.Valid(); err != nil {
		return err
	}
	ls.mu.Lock()
	if end.After(ls.maxEnd) {
		ls.maxEnd = end
	}
	if ttl >= ls.headTTL {
		ls.headTTL, ls.headAt = ttl, time.Now()
	}
	ls.mu.Unlock()
	if end.IsZero() {
		return nil // bounded by membership, which every beat covers
	}
	at, h := ls.hb.Published()
	if !end.After(at.Add(h)) {
		return nil
	}
	if err := ls.hb.Push(ctx, ls.horizon()); err != nil {
		return fmt.Errorf("%w: %w", ErrNoLease, err)
	}
	return nil
}

// Stop ends the heartbeats.
func (ls *Lease) Stop() { ls.hb.Stop() }
