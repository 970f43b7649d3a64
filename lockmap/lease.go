package lockmap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
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
	// horizon after it was last granted; longHold, for one above longTTL.
	headHold, longHold time.Duration

	mu sync.Mutex
	// sticky is the latest deadline of a grant whose hold the lease cannot
	// see (Cover, TryCover: range locks, routed shares): counted until it
	// passes, released or not.
	sticky time.Time
	// held report the latest deadline of the holds in force, one per Map
	// that tracks this lease's holds (its expirer; trackHolds).
	held []func() time.Time
	// ends and pins cover tracked grants (coverPinned) between their
	// check and the moment held sees them: ends[gen%2] collects the
	// deadlines checked since the last rotation, ends[(gen+1)%2] those of
	// the generation before, and each beat drops the older one unless a
	// grant checked there is still pinned (it has not reached held yet).
	ends    [2]time.Time
	pins    [2]int32
	gen     uint64
	headTTL time.Duration // longest TTL granted lately: publish room for the next one
	headAt  time.Time
	lost    error
	// retired: the membership is ending (Retire); no room, no grant.
	retired bool
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
	ls.headHold, ls.longHold = time.Minute, 10*time.Second
	ls.hb = rdma.StartExactHeartbeat(ep, ls.horizon, func(err error) {
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

// horizon is what each beat publishes, called under the heartbeat's lock
// (rdma.StartExactHeartbeat): room for every grant in force and every grant
// about to be told, and for the next one of the longest recent TTL, and
// never less than the floor, DeadAfter, which bounds locks without a TTL
// (they die with the proxy's membership). A grant released no longer
// counts: before, the horizon only ever went up to the latest deadline
// granted, so one lock of a day, released at once, kept a restarted
// embedded proxy from serving any lock for that day.
func (ls *Lease) horizon() time.Duration {
	ls.mu.Lock()
	if len(ls.held) > 0 {
		// Every grant checked in the older generation that is not pinned
		// any more has reached held, or was never told.
		if old := (ls.gen + 1) % 2; ls.pins[old] == 0 {
			ls.ends[old] = time.Time{}
			ls.gen++
		}
		if ls.retired {
			// No grant is checked any more, and one checked that is not
			// pinned is in held by now, or was never told, or pushes a
			// beat of its own (cover): a last beat need not wait two
			// beats for the generations to turn over.
			for g, n := range ls.pins {
				if n == 0 {
					ls.ends[g] = time.Time{}
				}
			}
		}
	}
	latest := ls.sticky
	for _, e := range ls.ends {
		if e.After(latest) {
			latest = e
		}
	}
	hold := ls.headHold
	if ls.headTTL > longTTL {
		hold = ls.longHold
	}
	if time.Since(ls.headAt) > hold {
		ls.headTTL = 0 // a long TTL used once should not slow recovery forever
	}
	room := ls.headTTL
	if ls.retired {
		room = 0
	}
	held := ls.held // never changed in place: trackHolds appends to a copy
	floor, margin := ls.floor, ls.margin
	var confirming time.Duration
	for c := range ls.confirming {
		confirming = max(confirming, c)
	}
	ls.mu.Unlock()
	// Read after the rotation: a grant unpinned before it is in held by now.
	for _, f := range held {
		if e := f(); e.After(latest) {
			latest = e
		}
	}
	h := max(time.Until(latest), room, floor) + margin
	return max(h, confirming)
}

// longTTL is where a TTL is long enough that the room kept for the next
// grant of it costs more than that grant's wait: the room is in every beat
// the memory node saves, so a restart, or a recovery, would wait it out with
// every lock of that TTL released. It is kept for longHold (10 s) instead
// of headHold (a minute): locks of hours taken more often than that are
// answered as fast as short ones, and a sparser one pushes a beat and waits
// for the memory node to save it (about 50 ms on the embedded memory node,
// an fsync: docs/notes/2026-11-29-horizon.md).
const longTTL = 10 * time.Minute

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
// the memory node confirms it has saved it. The lease cannot see when such
// a grant ends, so its deadline counts until it passes.
func (ls *Lease) Cover(ctx context.Context, end time.Time, ttl time.Duration) error {
	_, err := ls.cover(ctx, end, ttl, false)
	return err
}

// cover is Cover; with track, the grant is pinned (coverPinned).
func (ls *Lease) cover(ctx context.Context, end time.Time, ttl time.Duration, track bool) (pin, error) {
	p, covered, err := ls.tryCover(end, ttl, track)
	if covered || err != nil {
		return p, err
	}
	// From the push until the grant is pinned every beat covers it, even
	// one that rotates its deadline out of the lease's generations: the
	// confirmation relies on the beats in between, as it did when a
	// deadline counted until it passed.
	need := time.Until(end) + ls.margin
	ls.confirm(need, 1)
	defer ls.confirm(need, -1)
	if err := ls.hb.Push(ctx, need); err != nil {
		return pin{}, fmt.Errorf("%w: %w", ErrNoLease, err)
	}
	// Push may publish more than asked (what the horizon reads): the
	// horizon to confirm is what it published.
	_, h := ls.hb.Published()
	if err := ls.awaitConfirm(ctx, h); err != nil {
		return pin{}, err
	}
	if track {
		p = ls.pinConfirmed(end)
	}
	return p, nil
}

// pinConfirmed pins a grant whose horizon Cover pushed and had confirmed,
// while the beats still publish at least that horizon.
func (ls *Lease) pinConfirmed(end time.Time) (p pin) {
	ls.hb.With(func(time.Time, time.Duration, time.Duration) {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if ls.record(end, true) {
			p = ls.pinLocked()
		}
	})
	return p
}

// record counts a grant ending at end in the horizon, ls.mu held: in the
// current generation if track and a Map tracks the lease's holds (it
// reports true), else until end passes.
func (ls *Lease) record(end time.Time, track bool) bool {
	if !track || len(ls.held) == 0 {
		if end.After(ls.sticky) {
			ls.sticky = end
		}
		return false
	}
	if cur := ls.gen % 2; end.After(ls.ends[cur]) {
		ls.ends[cur] = end
	}
	return true
}

// pinLocked pins the grant just recorded in the current generation;
// ls.mu is held.
func (ls *Lease) pinLocked() pin {
	ls.pins[ls.gen%2]++
	return pin{ls: ls, gen: ls.gen}
}

// confirm adds n to the count of grants that need every beat to publish
// at least h.
func (ls *Lease) confirm(h time.Duration, n int) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.confirming == nil {
		ls.confirming = make(map[time.Duration]int)
	}
	if ls.confirming[h] += n; ls.confirming[h] == 0 {
		delete(ls.confirming, h)
	}
}

// pin is a tracked grant's place in the lease's horizon, from its check
// until the Map's expirer has its deadline (unpin).
type pin struct {
	ls  *Lease
	gen uint64
}

// unpin lets the horizon drop the pinned grant's deadline from the
// generation it was checked in: the caller has scheduled its expiry, or
// given it up.
func (p pin) unpin() {
	if p.ls == nil {
		return
	}
	p.ls.mu.Lock()
	p.ls.pins[p.gen%2]--
	p.ls.mu.Unlock()
}

// coverPinned is Cover where block allows it, else TryCover, for a grant
// whose hold the Map's expirer will schedule: while the pin is held the
// deadline counts in every beat, and once unpinned the expirer's latest
// deadline covers it until it is released. Without block it reports false,
// and no error, for anything but a covered grant: the caller leaves it to
// Cover on a goroutine, errors included, because failing may mean giving
// locks back, which an event loop does not do.
func coverPinned(ctx context.Context, ls *Lease, end time.Time, ttl time.Duration, block bool) (pin, bool, error) {
	if block {
		p, err := ls.cover(ctx, end, ttl, true)
		if err != nil {
			return pin{}, false, err
		}
		return p, true, nil
	}
	p, ok, err := ls.tryCover(end, ttl, true)
	return p, ok && err == nil, nil
}

// TryCover is Cover for a caller that must not block (an event loop): it
// does what Cover does short of pushing a heartbeat, and reports false if
// one must be pushed, for Cover to finish on a goroutine.
func (ls *Lease) TryCover(end time.Time, ttl time.Duration) (bool, error) {
	_, ok, err := ls.tryCover(end, ttl, false)
	return ok, err
}

// tryCover is TryCover; with track, a covered grant is pinned. Every
// acquire comes here, so the check against the newest beat, the loss
// check, the recording of the grant and the pin take one visit to each
// lock. The grant is recorded even when it goes on to fail (the horizon
// only errs long), so that the beat Cover pushes covers it.
func (ls *Lease) tryCover(end time.Time, ttl time.Duration, track bool) (p pin, covered bool, err error) {
	lay := ls.ep.Layout()
	if max := lay.MaxLease; max > 0 && ttl > max {
		return pin{}, false, fmt.Errorf("%w (%v > %v)", ErrTTLTooLong, ttl, max)
	}
	persistent := lay.Persistent
	ls.hb.With(func(at time.Time, h, confirmed time.Duration) {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if err = ls.validAt(at, ls.lost); err != nil {
			return
		}
		if ls.retired {
			err = ErrDraining
			return
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
		if end.IsZero() {
			covered = true // bounded by membership, which every beat covers
			return
		}
		tracked := ls.record(end, track)
		covered = !end.After(at.Add(h)) && (!persistent || h <= confirmed)
		if covered && tracked {
			p = ls.pinLocked()
		}
	})
	return p, covered, err
}

// trackHolds has the lease learn when its tracked grants end from held,
// the latest deadline of the holds in force (the Map's expirer).
func (ls *Lease) trackHolds(held func() time.Time) {
	ls.mu.Lock()
	ls.held = append(slices.Clip(ls.held), held)
	ls.mu.Unlock()
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
	ls.confirm(h, 1)
	defer ls.confirm(h, -1)
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

// Retire publishes a last beat that counts the grants in force and none to
// come, and refuses every grant from then on: call it when the membership
// is about to end cleanly, after the clients have let go. Every beat keeps
// room for the next grant of the longest recent TTL, so that grants need
// not push one; the memory node saves what the last beat says, and a next
// start on the embedded memory node's state directory would wait that room
// out with nothing held (half a minute after a drained stop, with 30 s
// locks; an hour, with an hour's lock taken just before).
//
// A grant either checked its cover before the flag was set, under the same
// lock, and is counted in the beat Retire pushes, or is refused.
func (ls *Lease) Retire(ctx context.Context) error {
	ls.mu.Lock()
	ls.retired = true
	ls.mu.Unlock()
	if err := ls.hb.Push(ctx, 0); err != nil {
		return fmt.Errorf("%w: %w", ErrNoLease, err)
	}
	return nil
}

// Beats is the number of heartbeats posted (rdma.Heartbeat.Beats).
func (ls *Lease) Beats() uint64 { return ls.hb.Beats() }

// Stop ends the heartbeats.
func (ls *Lease) Stop() { ls.hb.Stop() }
