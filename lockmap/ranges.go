package lockmap

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rangelock"
	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// RangeDepth is the depth of every range-lock tree: 64 × 4^8 = 4,194,304
// units, 87,381 nodes, 1.4 MB per tree. A memory node that serves range
// locks sizes RegionRanges in whole trees of this depth; every proxy and
// memory node must agree on it.
const RangeDepth = 8

// RangeTreeBytes is the size of one range tree in RegionRanges.
func RangeTreeBytes() uint64 { return rangeGeometry(0).Bytes() }

// RangeUnits is the space a range lock's spans lie in: [0, RangeUnits).
func RangeUnits() uint64 { return rangeGeometry(0).Units() }

// rangeGeometry is tree t of RegionRanges.
func rangeGeometry(t uint64) rangelock.Tree {
	size, _ := rangelock.NewTree(rdma.Addr{}, RangeDepth)
	tree, _ := rangelock.NewTree(rdma.Addr{Region: rdma.RegionRanges, Offset: t * size.Bytes()}, RangeDepth)
	return tree
}

// Errors of range locks.
var (
	// ErrNoRanges: the memory node has no range trees.
	ErrNoRanges = errors.New("lockmap: range locks are not available")
	// ErrRangePoolFull: every range tree of the memory node is bound to a
	// name in use. The error carries the memory node's explanation.
	ErrRangePoolFull = errors.New("lockmap: no free range tree")
)

// Range locks (LOCK.RANGE.*). Each range-lock name in use has a tree of
// its own on its memory node: the proxy binds the name when it starts
// using it (the memory node picks a free tree, rdma.RangeBind) and unbinds
// it when it holds no span of it, waits for none, and its Locker has
// nothing left in flight. A name nobody uses has no tree. While bound, the
// name's spans are taken and released with one-sided verbs only
// (rangelock); the memory node's CPU is involved again only to repair the
// tree after a user died, or lost track of a verb's outcome (memnode
// ranges.go), which reaches this proxy as probes (rangeProbe).

// rangeHold is one span held through this proxy.
type rangeHold struct {
	key, token string
	rn         *rangeName
	held       *rangelock.Held
	ttl        time.Duration
	deadline   time.Time
	counted    time.Time // the deadline ranges.count has, zero if none
	timer      *time.Timer
	dropped    bool // guarded by rn.mu
}

// rangeName is one name's range lock as this proxy uses it, on one
// membership of its memory node.
type rangeName struct {
	key    string
	digest [rdma.RangeNameSize]byte
	dom    *Domain

	// bound is closed when the bind is answered; then tree and err are set.
	bound chan struct{}
	tree  uint64
	err   error

	mu sync.Mutex
	// users: acquires in flight and spans held. The name is unbound when
	// it drops to zero and the Locker is idle.
	users int
	holds []*rangeHold
	// lk is the name's Locker; nil while frozen by a repair.
	lk *rangelock.Locker
	// A repair freezes the name: no verb goes to the tree until it says
	// resume. reapplied: the held spans were put back in the zeroed tree,
	// so a release must take them out again; before that a release only
	// forgets its span.
	frozen, reapplied bool
	resumed           chan struct{} // closed on resume (or when the name is gone)
	// ops: acquires and releases that may still post verbs, or have a
	// grant to record; a freeze waits for them.
	ops    int
	opsOut sync.Cond
	// gone: the membership was replaced, or the name unbound.
	gone bool
	// repairing: a repair request is on its way (rdma.RangeRepair).
	repairing bool
	// round is the round of the last repair step taken (rounded, as the
	// probes carry it); rounds tells whether there was one.
	round  uint8
	rounds bool
}

// ranges are the proxy's range locks.
type ranges struct {
	mu      sync.Mutex
	names   map[string]*rangeName // by key, on the current memberships
	byTree  map[rangeTreeKey]*rangeName
	binding map[*Domain]int  // binds on their way, by membership
	probed  map[*Domain]bool // memberships whose probes come here

	// ends counts the deadlines of the spans held with a TTL, for the
	// leases (latest); endsMu is taken last, under any other lock.
	endsMu sync.Mutex
	ends   deadlines
}

// latest is no earlier than the deadline of every span held with a TTL,
// and zero if none is: what the leases publish for the spans in force.
// Before, a span's deadline counted in the lease horizon until it passed,
// released or not, so a span of an hour released at once held up an
// embedded proxy's next start for the hour.
func (r *ranges) latest() time.Time {
	r.endsMu.Lock()
	defer r.endsMu.Unlock()
	return r.ends.latest()
}

// count adds n spans ending at at.
func (r *ranges) count(at time.Time, n int32) {
	r.endsMu.Lock()
	r.ends.count(at, n)
	r.endsMu.Unlock()
}

type rangeTreeKey struct {
	dom  *Domain
	tree uint64
}

// RangeHolder describes one span held through this proxy.
type RangeHolder struct {
	Token  string
	L, R   uint64
	Mode   rangelock.Mode
	Fence  uint64
	TTLms  int64 // -1: no TTL
	Domain string
}

// RangeInfo describes a range-lock name.
type RangeInfo struct {
	Key    string
	Domain string
	// Tree is the name's tree on the memory node while this proxy uses
	// it, else -1: a name nobody uses here has none.
	Tree    int64
	Units   uint64 // spans must lie in [0, Units)
	Holders []RangeHolder
}

// rangePollMax is how far a waiting span's polls back off: clients hold
// spans for milliseconds, and fixed 2 µs polls by every waiter take the
// CPU the holders need (on the embedded memory node, where a poll costs
// no round trip, 32 waiters made a cycle cost 6 ms of CPU).
const rangePollMax = 200 * time.Microsecond

// rangeTryBind is how long a try (WAIT 0) waits for its name's tree to be
// bound, or for a repair of it under way: a few round trips to the memory
// node, which on a loaded machine take far more than their usual
// milliseconds. A try gives up on a conflicting span at once; this bound
// is for the tree alone, and a try that ran out of it would answer nil
// with nothing held (TestRangeNamesNeverInterfere saw it at 250 ms).
const rangeTryBind = 2 * time.Second

// RangeAcquire locks [l, r) of key in mode for token, waiting up to wait;
// a wait of 0 tries: it grants whenever no conflicting span is held (or
// queued ahead), and answers at once otherwise. It answers the grant's
// fencing token, or ok = false if the span stayed taken for the whole
// wait. A TTL (0: none) releases the span when it runs out, as a Redis key
// expires. A Loop answers ErrWouldBlock instead.
func (m *Map) RangeAcquire(ctx context.Context, key, token string, l, r uint64, mode rangelock.Mode, ttl, wait time.Duration) (fence uint64, ok bool, err error) {
	if l >= r || r > RangeUnits() {
		return 0, false, fmt.Errorf("%w: [%d, %d) is empty or leaves [0, %d)", rangelock.ErrOutOfRange, l, r, RangeUnits())
	}
	if ttl < 0 {
		return 0, false, ErrBadTTL
	}
	if m.draining.Load() {
		return 0, false, ErrDraining
	}
	start := time.Now()
	try := wait <= 0
	deadline := start.Add(wait)
	if try {
		deadline = start.Add(rangeTryBind)
	}
	for {
		changed := *m.changed.Load()
		fence, ok, err = m.rangeAcquire(ctx, key, token, l, r, mode, ttl, try, deadline)
		if err == nil || !membershipGone(err) || !time.Now().Before(deadline) || ctx.Err() != nil {
			return fence, ok, err
		}
		// The membership is gone; the proxy is rejoining. Wait for it,
		// within the budget, then try again on the new one.
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

func (m *Map) rangeAcquire(ctx context.Context, key, token string, l, r uint64, mode rangelock.Mode, ttl time.Duration, try bool, deadline time.Time) (uint64, bool, error) {
	di, _ := Locate(key, m.entries)
	d := m.doms[di].Load()
	if d.Lease != nil {
		if err := d.Lease.Valid(); err != nil {
			return 0, false, err
		}
		if max := d.Client.Endpoint().Layout().MaxLease; max > 0 && ttl > max {
			return 0, false, fmt.Errorf("%w (%v > %v)", ErrTTLTooLong, ttl, max)
		}
	}
	rn, err := m.rangeUse(ctx, d, key, deadline)
	if err != nil || rn == nil {
		return 0, false, err
	}
	for {
		lk, err := m.rangeLocker(ctx, rn, deadline)
		if err != nil || lk == nil {
			m.rangeDone(rn)
			return 0, false, err
		}
		var held *rangelock.Held
		if try {
			held, err = lk.TryAcquire(ctx, l, r, mode)
		} else {
			wctx, cancel := context.WithDeadline(ctx, deadline)
			held, err = lk.Acquire(wctx, l, r, mode)
			cancel()
		}
		if err == nil {
			h := m.rangeRecord(rn, key, token, held, ttl)
			if d.Lease != nil {
				// The lease must cover the TTL before the client is told,
				// or a dead proxy's span could be repaired away while its
				// client still believes it. Its deadline counts in the
				// horizon already (rangeRecord, ranges.latest), until the
				// span is dropped: no pin to hold.
				p, err := d.Lease.cover(ctx, h.deadline, ttl, true)
				p.unpin()
				if err != nil {
					m.rangeDrop(h)
					return 0, false, err
				}
			}
			return held.Token(), true, nil
		}
		m.rangeOpDone(rn)
		switch {
		case errors.Is(err, rangelock.ErrAborted):
			continue // a repair froze the name: wait for it to resume
		case errors.Is(err, rangelock.ErrBusy):
			m.rangeDone(rn)
			return 0, false, nil
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			m.rangeDone(rn)
			return 0, false, nil
		}
		m.rangeDone(rn)
		return 0, false, err
	}
}

// rangeUse counts one more user of key's name on d, binding it to a tree
// first if this proxy has none for it. It answers nil (and no error) if
// the deadline passed while the name's tree was being repaired.
func (m *Map) rangeUse(ctx context.Context, d *Domain, key string, deadline time.Time) (*rangeName, error) {
	rc, ok := d.Client.Endpoint().Control().(rdma.RangeControl)
	if !ok || !hasRanges(d.Client.Endpoint().Layout()) {
		return nil, fmt.Errorf("%w: memory node %s has no range trees (range_trees is 0 there)", ErrNoRanges, d.Name)
	}
	for {
		m.rng.mu.Lock()
		if m.rng.names == nil {
			m.rng.names = map[string]*rangeName{}
			m.rng.byTree = map[rangeTreeKey]*rangeName{}
			m.rng.binding = map[*Domain]int{}
			m.rng.probed = map[*Domain]bool{}
		}
		if !m.rng.probed[d] {
			m.rng.probed[d] = true
			d.Client.SetRangeProbe(func(entry uint64) rdma.Hold { return m.rangeProbe(d, entry) })
		}
		rn := m.rng.names[key]
		if rn != nil && rn.dom != d {
			// A membership since replaced (Replace forgets its names).
			rn.mu.Lock()
			rn.gone = true
			rn.mu.Unlock()
			m.rng.forgetLocked(rn)
			rn = nil
		}
		if rn != nil {
			rn.mu.Lock()
			rn.users++
			rn.mu.Unlock()
			m.rng.mu.Unlock()
			<-rn.bound
			if rn.err == nil {
				return rn, nil
			}
			m.rangeDone(rn)
			if !errors.Is(rn.err, errRangeBusy) {
				return nil, rn.err
			}
		} else {
			rn = &rangeName{key: key, digest: sha256.Sum256([]byte(key)), dom: d, bound: make(chan struct{}), users: 1}
			rn.opsOut.L = &rn.mu
			m.rng.names[key] = rn
			m.rng.binding[d]++
			m.rng.mu.Unlock()
			m.rangeBind(ctx, rc, rn)
			if rn.err == nil {
				return rn, nil
			}
			m.rangeDone(rn)
			if !errors.Is(rn.err, errRangeBusy) {
				return nil, rn.err
			}
		}
		// The name's tree is being repaired: ask again after a while.
		var after time.Duration
		var busy *rangeBusyError
		if errors.As(rn.err, &busy) {
			after = busy.after
		}
		after = max(after, time.Millisecond)
		if time.Now().Add(after).After(deadline) {
			return nil, nil
		}
		t := time.NewTimer(after)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
}

// errRangeBusy: the memory node is repairing the name's tree.
var errRangeBusy = errors.New("lockmap: the range lock's tree is being repaired")

type rangeBusyError struct{ after time.Duration }

func (e *rangeBusyError) Error() string { return errRangeBusy.Error() }
func (e *rangeBusyError) Unwrap() error { return errRangeBusy }

func hasRanges(l rdma.Layout) bool {
	for _, r := range l.Regions {
		if r.ID == rdma.RegionRanges && r.Size >= RangeTreeBytes() {
			return true
		}
	}
	return false
}

// rangeBind asks the memory node for rn's tree, and publishes the answer.
// The call is not cancelled with the client that asked (a bind the memory
// node counted but this proxy gave up on would hold a tree until the
// membership ends); the fabric bounds it.
func (m *Map) rangeBind(ctx context.Context, rc rdma.RangeControl, rn *rangeName) {
	rep, err := rc.Range(context.WithoutCancel(ctx), rdma.RangeRequest{Op: rdma.RangeBind, Name: rn.digest})
	m.rng.mu.Lock()
	defer m.rng.mu.Unlock()
	if m.rng.binding[rn.dom]--; m.rng.binding[rn.dom] == 0 {
		delete(m.rng.binding, rn.dom)
	}
	switch {
	case err != nil:
		if errors.Is(err, rdma.ErrBadRequest) {
			err = fmt.Errorf("%w: %w", ErrNoRanges, err)
		}
	case rep.Status == rdma.RangeFull:
		err = fmt.Errorf("%w: memory node %s: %s", ErrRangePoolFull, rn.dom.Name, rep.Reason)
	case rep.Status == rdma.RangeBusy:
		err = &rangeBusyError{after: rep.RetryAfter}
	case rep.Status != rdma.RangeOK || rep.Tree >= maxRangeTrees(rn.dom):
		err = fmt.Errorf("%w: memory node %s answered a bind with %d, tree %d", rdma.ErrBadRequest, rn.dom.Name, rep.Status, rep.Tree)
	}
	if err != nil {
		rn.err = err
		if m.rng.names[rn.key] == rn {
			delete(m.rng.names, rn.key)
		}
		rn.mu.Lock()
		rn.gone = true
		rn.mu.Unlock()
		close(rn.bound)
		return
	}
	rn.tree = rep.Tree
	rn.mu.Lock()
	rn.lk = m.rangeLockerFor(rn)
	rn.mu.Unlock()
	if rn.gone {
		// The membership was replaced while the bind was on its way: the
		// reference dies with the old membership at the memory node.
		rn.err = fmt.Errorf("%w: the membership was replaced", rdma.ErrClosed)
	} else {
		m.rng.byTree[rangeTreeKey{rn.dom, rn.tree}] = rn
	}
	close(rn.bound)
}

func maxRangeTrees(d *Domain) uint64 {
	for _, r := range d.Client.Endpoint().Layout().Regions {
		if r.ID == rdma.RegionRanges {
			return r.Size / RangeTreeBytes()
		}
	}
	return 0
}

func (m *Map) rangeLockerFor(rn *rangeName) *rangelock.Locker {
	return rangelock.New(rn.dom.Client.Endpoint(), rangeGeometry(rn.tree), rangelock.Config{
		FastPath:    true,
		Wait:        m.cfg.RangeWait,
		PollMax:     rangePollMax,
		OnUncertain: func(err error) { m.rangeAskRepair(rn, err) },
	})
}

// rangeLocker returns rn's Locker, counting the caller as an op in flight
// (rangeOpDone ends it), after waiting out a freeze until the deadline. It
// answers nil (and no error) if the deadline passed first.
func (m *Map) rangeLocker(ctx context.Context, rn *rangeName, deadline time.Time) (*rangelock.Locker, error) {
	for {
		rn.mu.Lock()
		if rn.gone {
			rn.mu.Unlock()
			return nil, fmt.Errorf("%w: the membership that bound the range lock was replaced", rdma.ErrClosed)
		}
		if !rn.frozen {
			rn.ops++
			lk := rn.lk
			rn.mu.Unlock()
			return lk, nil
		}
		if rn.resumed == nil {
			rn.resumed = make(chan struct{})
		}
		resumed := rn.resumed
		rn.mu.Unlock()
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-resumed:
			t.Stop()
		case <-t.C:
			return nil, nil
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
}

// rangeOpDone ends an op rangeLocker started.
func (m *Map) rangeOpDone(rn *rangeName) {
	rn.mu.Lock()
	if rn.ops--; rn.ops == 0 {
		rn.opsOut.Broadcast()
	}
	rn.mu.Unlock()
}

// rangeRecord records a grant, ending its op: from here on a repair puts
// it back in the tree.
func (m *Map) rangeRecord(rn *rangeName, key, token string, held *rangelock.Held, ttl time.Duration) *rangeHold {
	h := &rangeHold{key: key, token: token, rn: rn, held: held, ttl: ttl}
	rn.mu.Lock()
	rn.holds = append(rn.holds, h)
	if ttl > 0 {
		h.deadline = time.Now().Add(ttl)
		h.counted = h.deadline
		m.rng.count(h.counted, 1) // before the lease checks it (rangeAcquire)
		h.timer = time.AfterFunc(ttl, func() { m.rangeDrop(h) })
	}
	if rn.ops--; rn.ops == 0 {
		rn.opsOut.Broadcast()
	}
	rn.mu.Unlock()
	return h
}

// rangeDone ends one user of rn, and unbinds the name once it has none and
// its Locker is idle.
func (m *Map) rangeDone(rn *rangeName) {
	m.rangeUnbindIf(rn, func() bool {
		rn.users--
		if rn.users != 0 || rn.gone || rn.err != nil {
			return false
		}
		if lk := rn.lk; lk != nil && !lk.Idle() {
			// Requests that gave up left a bakery ticket to pass on: the
			// tree stays ours until that is done.
			go func() {
				lk.WaitIdle()
				m.rangeUnbindIfIdle(rn, lk)
			}()
			return false
		}
		return true
	})
}

// rangeUnbindIfIdle unbinds rn if it still has no user and lk, its Locker,
// is idle.
func (m *Map) rangeUnbindIfIdle(rn *rangeName, lk *rangelock.Locker) {
	m.rangeUnbindIf(rn, func() bool {
		return rn.users == 0 && !rn.gone && rn.lk == lk && lk.Idle()
	})
}

// rangeUnbindIf unbinds rn if idle, called with m.rng.mu and rn.mu held,
// says so: the name is forgotten under the locks, and its tree unbound
// after them.
func (m *Map) rangeUnbindIf(rn *rangeName, idle func() bool) {
	m.rng.mu.Lock()
	rn.mu.Lock()
	gone := idle()
	if gone {
		rn.gone = true
		m.rng.forgetLocked(rn)
	}
	rn.mu.Unlock()
	m.rng.mu.Unlock()
	if gone {
		m.rangeUnbind(rn)
	}
}

// forgetLocked drops rn from the maps; m.rng.mu is held.
func (g *ranges) forgetLocked(rn *rangeName) {
	if g.names[rn.key] == rn {
		delete(g.names, rn.key)
	}
	k := rangeTreeKey{rn.dom, rn.tree}
	if g.byTree[k] == rn {
		delete(g.byTree, k)
	}
}

// rangeUnbind gives the name's tree back. It returns once the memory node
// has it, so that a client told its span was released finds the tree free
// for another name. (The memory node counts references: an unbind that a
// bind of the same name from elsewhere overtakes does no harm.)
func (m *Map) rangeUnbind(rn *rangeName) {
	rc, ok := rn.dom.Client.Endpoint().Control().(rdma.RangeControl)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rc.Range(ctx, rdma.RangeRequest{Op: rdma.RangeUnbind, Name: rn.digest, Tree: rn.tree}); err != nil {
		// The reference goes when the membership does.
		m.log.Info("range unbind failed", zap.String("key", rn.key), zap.Uint64("tree", rn.tree), zap.Error(err))
	}
}

// rangeAskRepair asks the memory node to repair rn's tree: one of this
// proxy's verbs on it has an outcome nobody knows.
func (m *Map) rangeAskRepair(rn *rangeName, cause error) {
	rn.mu.Lock()
	if rn.repairing {
		rn.mu.Unlock()
		return
	}
	rn.repairing = true
	rn.mu.Unlock()
	m.log.Warn("range verb outcome unknown; asking for a repair of the tree", zap.String("key", rn.key), zap.Uint64("tree", rn.tree), zap.Error(cause))
	go func() {
		defer func() {
			rn.mu.Lock()
			rn.repairing = false
			rn.mu.Unlock()
		}()
		rc, ok := rn.dom.Client.Endpoint().Control().(rdma.RangeControl)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := rc.Range(ctx, rdma.RangeRequest{Op: rdma.RangeRepair, Name: rn.digest, Tree: rn.tree}); err != nil {
			m.log.Warn("range repair request failed", zap.String("key", rn.key), zap.Error(err))
		}
	}()
}

// rangeProbe answers the memory node's probes of a repair of one of d's
// trees (rdma.RangeProbe): freeze, put back what is held, resume.
func (m *Map) rangeProbe(d *Domain, entry uint64) rdma.Hold {
	step, round, tree, _ := rdma.ParseRangeProbe(entry)
	var rn *rangeName
	for wait := 0; ; wait++ {
		m.rng.mu.Lock()
		rn = m.rng.byTree[rangeTreeKey{d, tree}]
		pending := m.rng.binding[d] > 0
		m.rng.mu.Unlock()
		if rn != nil {
			break
		}
		if !pending {
			return rdma.HoldNone // nothing of ours on it
		}
		if wait == 20 {
			// The tree may be one a bind on its way names (its reply
			// came in before this probe, and is being recorded): ask
			// again.
			return rdma.HoldActive
		}
		time.Sleep(time.Millisecond)
	}
	rn.mu.Lock()
	stale := rn.rounds && rdma.RangeRoundBefore(round, rn.round)
	if !stale && step == rdma.RangeFreeze {
		rn.round, rn.rounds = round, true
	}
	stale = stale || (step != rdma.RangeFreeze && (!rn.rounds || round != rn.round))
	rn.mu.Unlock()
	if stale {
		// A step of a round that is over, handled late (its probe timed
		// out); or a step of a round this node never froze for.
		return rdma.HoldActive
	}
	switch step {
	case rdma.RangeFreeze:
		rn.mu.Lock()
		rn.frozen, rn.reapplied = true, false
		lk := rn.lk
		rn.lk = nil
		if rn.resumed == nil {
			rn.resumed = make(chan struct{})
		}
		rn.mu.Unlock()
		if lk != nil {
			lk.Abort() // acquires in flight give up and undo; tickets stay
		}
		rn.mu.Lock()
		for rn.ops > 0 {
			rn.opsOut.Wait()
		}
		rn.mu.Unlock()
		return rdma.HoldNone
	case rdma.RangeReapply:
		rn.mu.Lock()
		defer rn.mu.Unlock()
		if !rn.frozen {
			return rdma.HoldActive // not frozen by this repair: start over
		}
		var b rdma.Batch
		for _, h := range rn.holds {
			h.held.Reapply(&b)
		}
		if b.Len() > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := d.Client.Endpoint().Post(ctx, &b)
			cancel()
			if err == nil {
				err = b.FirstErr()
			}
			if err != nil {
				m.log.Warn("range repair: putting held spans back failed", zap.String("key", rn.key), zap.Error(err))
				return rdma.HoldActive
			}
		}
		rn.reapplied = true
		return rdma.HoldNone
	case rdma.RangeResume:
		rn.mu.Lock()
		if rn.frozen {
			rn.frozen, rn.reapplied = false, false
			rn.lk = m.rangeLockerFor(rn)
			if rn.resumed != nil {
				close(rn.resumed)
				rn.resumed = nil
			}
			if rn.users == 0 {
				// The last user left during the repair, and a wait for
				// the Locker it replaced to go idle (rangeDone) no
				// longer names the current one: the tree would stay
				// bound with nothing held, for the membership's life.
				go m.rangeUnbindIfIdle(rn, rn.lk)
			}
		}
		rn.mu.Unlock()
		return rdma.HoldNone
	}
	return rdma.HoldActive
}

// RangeRelease releases token's hold of exactly [l, r) on key, and reports
// whether there was one.
func (m *Map) RangeRelease(key, token string, l, r uint64) bool {
	m.rng.mu.Lock()
	rn := m.rng.names[key]
	m.rng.mu.Unlock()
	if rn == nil {
		return false
	}
	var found *rangeHold
	rn.mu.Lock()
	for _, h := range rn.holds {
		if hl, hr := h.held.Span(); h.token == token && hl == l && hr == r {
			found = h
			break
		}
	}
	rn.mu.Unlock()
	if found == nil {
		return false
	}
	// A span past its TTL is gone already, whatever its timer is doing:
	// let it go, and answer as for a span nobody holds.
	live := found.live(time.Now())
	return m.rangeDrop(found) && live
}

// live reports whether h is in force at now: a span with a TTL ends at the
// instant of its deadline, as point locks do (hold.live).
func (h *rangeHold) live(now time.Time) bool { return h.ttl <= 0 || now.Before(h.deadline) }

// rangeDrop forgets h and unlocks its span, once: a release and the TTL's
// expiry may race, and only the first one unlocks. While a repair has the
// name frozen, a span not yet put back is only forgotten: the rebuilt tree
// will not have it.
func (m *Map) rangeDrop(h *rangeHold) bool {
	rn := h.rn
	rn.mu.Lock()
	if h.dropped {
		rn.mu.Unlock()
		return false
	}
	h.dropped = true
	if !h.counted.IsZero() {
		m.rng.count(h.counted, -1)
	}
	for i, x := range rn.holds {
		if x == h {
			rn.holds = append(rn.holds[:i:i], rn.holds[i+1:]...)
			break
		}
	}
	if h.timer != nil {
		h.timer.Stop()
	}
	post := !rn.gone && (!rn.frozen || rn.reapplied)
	if post {
		rn.ops++
	}
	rn.mu.Unlock()
	if post {
		if err := h.held.Release(context.Background()); err != nil {
			m.log.Warn("range release failed", zap.String("key", h.key), zap.Error(err))
		}
		m.rangeOpDone(rn)
	}
	m.rangeDone(rn)
	return true
}

// rangeForget drops every range lock of membership old, which was
// replaced: its holds are void (their memory node has forgotten them, or
// will repair them away once the old membership's horizon has passed), and
// acquires waiting on them start over on the new membership.
func (m *Map) rangeForget(old *Domain) (lost int) {
	m.rng.mu.Lock()
	defer m.rng.mu.Unlock()
	for _, rn := range m.rng.names {
		if rn.dom != old {
			continue
		}
		rn.mu.Lock()
		rn.gone = true
		for _, h := range rn.holds {
			h.dropped = true
			if !h.counted.IsZero() {
				m.rng.count(h.counted, -1)
			}
			if h.timer != nil {
				h.timer.Stop()
			}
			lost++
		}
		rn.holds = nil
		if rn.resumed != nil {
			close(rn.resumed)
			rn.resumed = nil
		}
		rn.mu.Unlock()
		m.rng.forgetLocked(rn)
	}
	delete(m.rng.probed, old)
	delete(m.rng.binding, old)
	return lost
}

// RangeCount is the number of spans held through this proxy.
func (m *Map) RangeCount() int {
	m.rng.mu.Lock()
	rns := make([]*rangeName, 0, len(m.rng.names))
	for _, rn := range m.rng.names {
		rns = append(rns, rn)
	}
	m.rng.mu.Unlock()
	n := 0
	for _, rn := range rns {
		rn.mu.Lock()
		n += len(rn.holds)
		rn.mu.Unlock()
	}
	return n
}

// RangeLookup describes key's range lock and the spans held here.
func (m *Map) RangeLookup(key string) (RangeInfo, error) {
	di, _ := Locate(key, m.entries)
	d := m.doms[di].Load()
	if !hasRanges(d.Client.Endpoint().Layout()) {
		return RangeInfo{}, fmt.Errorf("%w: memory node %s has no range trees (range_trees is 0 there)", ErrNoRanges, d.Name)
	}
	in := RangeInfo{Key: key, Domain: d.Name, Tree: -1, Units: RangeUnits()}
	m.rng.mu.Lock()
	rn := m.rng.names[key]
	m.rng.mu.Unlock()
	if rn == nil || rn.dom != d {
		return in, nil
	}
	select {
	case <-rn.bound:
	default:
		return in, nil // a bind on its way
	}
	if rn.err != nil {
		return in, nil
	}
	in.Tree = int64(rn.tree)
	now := time.Now()
	rn.mu.Lock()
	for _, h := range rn.holds {
		if !h.live(now) {
			continue // its timer drops it
		}
		l, r := h.held.Span()
		ttl := int64(-1)
		if h.ttl > 0 {
			ttl = h.deadline.Sub(now).Milliseconds()
		}
		in.Holders = append(in.Holders, RangeHolder{Token: h.token, L: l, R: r, Mode: h.held.Mode(), Fence: h.held.Token(), TTLms: ttl, Domain: d.Name})
	}
	rn.mu.Unlock()
	sort.Slice(in.Holders, func(i, j int) bool { return in.Holders[i].L < in.Holders[j].L })
	return in, nil
}
