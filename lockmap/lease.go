package lockmap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// ErrTTLTooLong: the TTL exceeds the memory node's max_lease, the longest
// lease it will wait out after a restart.
var ErrTTLTooLong = errors.New("lockmap: TTL exceeds the memory node's max_lease")

// ErrNoLease means the proxy cannot prove to its memory node that it is alive,
// so it must not grant, extend, or trust the locks it holds there.
var ErrNoLease = errors.New("lockmap: no lease with the memory node")

// Lease is a proxy's liveness with one memory node (docs/reliability.md). It heartbeats
// into the node table and publishes a lease horizon: a bound on when every
// grant this proxy made there ends. The memory node will not recover an entry
// a dead proxy may hold until that horizon has passed, so a grant is only
// made once the published horizon covers its deadline.
type Lease struct {
	ep        rdma.Endpoint
	hb        *rdma.Heartbeat
	deadAfter time.Duration
	selfFence time.Duration
	// floor and margin shape the published horizon (horizon): at least
	// floor, plus margin so that the periodic beats cover the next grants
	// without a push.
	floor, margin time.Duration
	// headHold is how long the longest recent TTL keeps room in the
	// horizon after it was last granted.
	headHold time.Duration

	mu      sync.Mutex
	maxEnd  time.Time     // latest deadline of a grant made under this lease
	headTTL time.Duration // longest TTL granted lately: publish room for the next one
	headAt  time.Time
	lost    error
	// confirming counts the horizons grants are waiting to have confirmed
	// (awaitConfirm): every beat publishes at least the longest of them.
	confirming map[time.Duration]int
}

// NewLease starts heartbeating on ep.
func NewLease(ep rdma.Endpoint) *Lease {
	l := ep.Layout()
	return startLease(ep, &Lease{deadAfter: l.DeadAfter, selfFence: l.DeadAfter / 2, floor: l.DeadAfter, margin: l.DeadAfter / 4})
}

// NewSoloLease is NewLease for a proxy whose memory node lives in its own
// process and dies with it (the embedded memory node). Nobody recovers its
// locks, so its horizon only tells the next start of the process how long
// the locks it granted may still be in force: the longest TTL (locks
// without a TTL die with the process, as on a Redis without persistence),
// plus margin, with no floor.
func NewSoloLease(ep rdma.Endpoint, margin time.Duration) *Lease {
	l := ep.Layout()
	return startLease(ep, &Lease{deadAfter: l.DeadAfter, selfFence: l.DeadAfter / 2, margin: margin})
}

func startLease(ep rdma.Endpoint, ls *Lease) *Lease {
	ls.headHold = time.Minute
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
// for the next one of the longest recent TTL, and never less than the
// floor, DeadAfter, which bounds locks without a TTL (they die with the
// proxy's membership).
func (ls *Lease) horizon() time.Duration {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	h := time.Until(ls.maxEnd)
	if time.Since(ls.headAt) > ls.headHold {
		ls.headTTL = 0 // a long TTL used once should not slow recovery forever
	}
	if ls.headTTL > h {
		h = ls.headTTL
	}
	h = max(h, ls.floor) + ls.margin
	for c := range ls.confirming {
		h = max(h, c)
	}
	return h
}

// Valid reports whether grants under this lease can still be trusted: the
// memory node has heard from us recently enough that it cannot have declared
// us dead. Past selfFence (half of DeadAfter) without an acknowledged beat,
// the proxy fences itself.
func (ls *Lease) Valid() error { return ls.validSince(ls.hb.LastAck()) }

// validSince is Valid with the last acknowledged beat already read.
func (ls *Lease) validSince(ack time.Time) error {
	ls.mu.Lock()
	lost := ls.lost
	ls.mu.Unlock()
	return ls.validAt(ack, lost)
}

// validAt is validSince with the lease's loss already read.
func (ls *Lease) validAt(ack time.Time, lost error) error {
	if lost != nil {
		return fmt.Errorf("%w: %w", ErrNoLease, lost)
	}
	if since := time.Since(ack); since > ls.selfFence {
		return fmt.Errorf("%w: last heartbeat acknowledged %v ago", ErrNoLease, since.Round(time.Millisecond))
	}
	return nil
}

// Cover makes sure a grant ending at end (zero: no TTL) is inside the
// published horizon, pushing a heartbeat first if it is not. With a memory
// node that keeps state across restarts, a longer horizon counts only once
// the memory node confirms it has saved it.
func (ls *Lease) Cover(ctx context.Context, end time.Time, ttl time.Duration) error {
	if covered, err := ls.TryCover(end, ttl); covered || err != nil {
		return err
	}
	h := ls.horizon()
	if err := ls.hb.Push(ctx, h); err != nil {
		return fmt.Errorf("%w: %w", ErrNoLease, err)
	}
	// Push may publish more than asked (never less than an acknowledged
	// beat promised): the horizon to confirm is what it published.
	_, h = ls.hb.Published()
	return ls.awaitConfirm(ctx, h)
}

// cover is Cover where block allows it, else TryCover. Without block it
// reports false, and no error, for anything but a covered grant: the caller
// leaves it to Cover on a goroutine, errors included, because failing may
// mean giving locks back, which an event loop does not do.
func cover(ctx context.Context, ls *Lease, end time.Time, ttl time.Duration, block bool) (bool, error) {
	if block {
		if err := ls.Cover(ctx, end, ttl); err != nil {
			return false, err
		}
		return true, nil
	}
	ok, err := ls.TryCover(end, ttl)
	return ok && err == nil, nil
}

// TryCover is Cover for a caller that must not block (an event loop): it
// does what Cover does short of pushing a heartbeat, and reports false if
// one must be pushed, for Cover to finish on a goroutine. Every acquire
// comes here, so one read of the published beat serves the validity and
// the horizon checks, and one lock both the loss check and the recording
// of the grant (recorded even when it goes on to fail: the horizon only
// errs long).
func (ls *Lease) TryCover(end time.Time, ttl time.Duration) (bool, error) {
	lay := ls.ep.Layout()
	if max := lay.MaxLease; max > 0 && ttl > max {
		return false, fmt.Errorf("%w (%v > %v)", ErrTTLTooLong, ttl, max)
	}
	at, h := ls.hb.Published()
	ls.mu.Lock()
	lost := ls.lost
	if lost == nil {
		if end.After(ls.maxEnd) {
			ls.maxEnd = end
		}
		if ttl >= ls.headTTL {
			// The grant's time is end - ttl: no need to read the clock on
			// every acquire, which mostly repeats the same TTL.
			granted := end.Add(-ttl)
			if end.IsZero() {
				granted = time.Now()
			}
			ls.headTTL, ls.headAt = ttl, granted
		}
	}
	ls.mu.Unlock()
	if err := ls.validAt(at, lost); err != nil {
		return false, err
	}
	if end.IsZero() {
		return true, nil // bounded by membership, which every beat covers
	}
	return !end.After(at.Add(h)) && ls.confirmed(h), nil
}

// confirmed reports whether horizon h is within what the memory node has
// confirmed saving (always, for one that keeps no state).
func (ls *Lease) confirmed(h time.Duration) bool {
	return !ls.ep.Layout().Persistent || h <= ls.hb.Confirmed()
}

// confirmPatience is how long a grant waits for the memory node to confirm
// the horizon it needs before it is refused. The memory node confirms on
// its next sweep after saving, about a heartbeat interval when its disk and
// CPU are idle; on a loaded machine a save (an fsync) or the sweep's turn
// takes seconds, and a refusal then is an error a client sees for a lock it
// could have had a moment later. A memory node that cannot save at all is
// reported after this long.
const confirmPatience = 10 * time.Second

// awaitConfirm polls the node slot until the memory node confirms h, or
// ctx ends, or confirmPatience (at least 10 heartbeats) has passed.
func (ls *Lease) awaitConfirm(ctx context.Context, h time.Duration) error {
	if ls.confirmed(h) {
		return nil
	}
	// The memory node confirms what it observed in the slot, and a later
	// beat overwrites the pushed one: were the periodic beats to publish
	// less meanwhile (the horizon falls as grants run out), a memory node
	// that came round late would never see h, and never confirm it.
	ls.mu.Lock()
	if ls.confirming == nil {
		ls.confirming = make(map[time.Duration]int)
	}
	ls.confirming[h]++
	ls.mu.Unlock()
	defer func() {
		ls.mu.Lock()
		if ls.confirming[h]--; ls.confirming[h] == 0 {
			delete(ls.confirming, h)
		}
		ls.mu.Unlock()
	}()
	l := ls.ep.Layout()
	slot := l.NodeSlotAddr(ls.ep.Node())
	addr := rdma.Addr{Region: slot.Region, Offset: slot.Offset + rdma.SlotConfirmed}
	deadline := time.Now().Add(max(10*l.HeartbeatInterval, confirmPatience))
	ls.hb.StartConfirm()
	for {
		var b [8]byte
		if err := ls.ep.Read(ctx, addr, b[:]); err != nil {
			return fmt.Errorf("%w: %w", ErrNoLease, err)
		}
		c := time.Duration(binary.LittleEndian.Uint64(b[:])) * time.Millisecond
		if c >= h {
			ls.hb.Confirm(c)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the memory node has not confirmed a %v lease horizon", ErrNoLease, h)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(l.HeartbeatInterval / 4):
		}
	}
}

// Beats is the number of heartbeats posted (rdma.Heartbeat.Beats).
func (ls *Lease) Beats() uint64 { return ls.hb.Beats() }

// Stop ends the heartbeats.
func (ls *Lease) Stop() { ls.hb.Stop() }
