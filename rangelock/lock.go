// Package rangelock is CITRON's range lock (FAST '23): locks on spans
// [l, r) of a fixed space, kept in a quaternary segment tree on a memory
// node and taken with one-sided verbs only, extended with shared spans.
// docs/rangelock.md lists how this follows the paper and where it departs.
package rangelock

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// Config tunes the protocol. The zero value is usable.
type Config struct {
	// M is the meet-in-the-middle distance (CITRON §3.5.5, default 4): a
	// request notifies every M-th ancestor, and an internal node's holder
	// checks M levels below it.
	M int
	// Wait is T_wait: how long a request on an internal node waits before
	// it checks its descendants, and so how long a request below it may take
	// from its last look at the ancestors to its notifications (default
	// 2 ms: the paper's 15 µs is five RDMA round trips; a TCP soft-NIC round
	// trip and a Go scheduler hiccup are hundreds of µs).
	Wait time.Duration
	// Drift is the clock-rate drift allowed between clients (default 1e-4,
	// as the paper).
	Drift float64
	// Poll is the interval between reads while waiting (default 2 µs).
	Poll time.Duration
	// PollMax, if above Poll, lets a wait back off: the interval doubles
	// after every read that finds the wait not over, up to PollMax. The
	// paper polls at a fixed interval (the default, PollMax = Poll), which
	// suits microsecond waits; a proxy's clients hold spans for
	// milliseconds, and on the in-process fabric a fixed 2 µs poll by every
	// waiter only burns the CPU the holders need.
	PollMax time.Duration
	// FastPath takes CITRON's second fast path (§3.8): an exclusive
	// request on a node whose children are leaves also sets every bit of
	// those leaves, in the same batch as it occupies the node. If all four
	// were clear, no request below can hold or come to hold a unit of the
	// node, and the request skips step 2(d)'s T_wait and its look at the
	// descendants; if not, it clears the bits it set and waits as usual.
	FastPath bool
	// LeafPatience, if positive, is how long a request keeps retrying a
	// leaf whose bits others hold before it takes the leaf's parent
	// instead, an internal node with a bakery queue, which no stream of
	// others can starve (CITRON §3.5.4, "optionally"). Off by default: at
	// 4 × Wait it cut make bench-range's goodput at L = 16 to a fifth and
	// raised the p99 (docs/rangelock.md), since the parent covers 256
	// units and waits T_wait.
	LeafPatience time.Duration
	// NoToken skips the fencing token (Held.Token is then 0), as CITRON
	// has none: the FAA on the tree's one counter word is a round trip per
	// grant and an atomic every request makes on the same address, which a
	// comparison with the paper's protocol must leave out.
	NoToken bool
	// TryPatience is how long a try (TryAcquire) waits for another request
	// before it answers ErrBusy (default 5 × Wait). A request that is only
	// on its way through the protocol, not holding, is out of the way
	// within a T_wait and a few round trips; one that holds a span is not.
	TryPatience time.Duration
	// OnUncertain, if set, is told when a verb that changes the tree
	// failed in a way that leaves its outcome unknown (a timeout or a
	// broken connection: it may have been applied). The tree may then hold
	// something nobody will undo; the caller has it repaired (the memory
	// node rebuilds it from what its users hold, rdma.RangeRepair).
	OnUncertain func(error)
	// Unsafe, for tests only, breaks the protocol in the named way so that
	// the checker can be seen to catch it: "no-descendant-wait" skips step
	// 2(d)'s wait for requests below an internal node; "fast-path-no-check"
	// skips it after the fast path whether or not every bit below was free.
	Unsafe string
}

func (c *Config) defaults() {
	if c.M <= 0 {
		c.M = 4
	}
	if c.Wait <= 0 {
		c.Wait = 2 * time.Millisecond
	}
	if c.Drift <= 0 {
		c.Drift = 1e-4
	}
	if c.Poll <= 0 {
		c.Poll = 2 * time.Microsecond
	}
	if c.TryPatience <= 0 {
		c.TryPatience = 5 * c.Wait
	}
	if c.PollMax < c.Poll {
		c.PollMax = c.Poll
	}
}

// Errors of acquisitions.
var (
	// ErrOutOfRange: the span is empty or leaves the tree.
	ErrOutOfRange = errors.New("rangelock: span empty or outside the tree")
	// ErrBusy: a try found a conflicting span held, or queued ahead of it.
	ErrBusy = errors.New("rangelock: span busy")
	// ErrAborted: the Locker was aborted (Abort) while the request was in
	// flight, or before it started; nothing of it stays in the tree.
	ErrAborted = errors.New("rangelock: locker aborted")
)

// Locker takes range locks on one tree through one endpoint.
type Locker struct {
	ep   rdma.Endpoint
	tree Tree
	cfg  Config

	// life ends with Abort; every wait of every request watches it.
	life context.Context
	kill context.CancelFunc
	gate gate

	aborts, backoffs, fastPaths, promotions atomic.Uint64
}

// gate counts a Locker's requests and background work, so that Abort can
// wait until none of them will post a verb again.
type gate struct {
	mu      sync.Mutex
	n       int
	aborted bool
	idle    sync.Cond // signalled when n drops to 0
}

func (g *gate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.aborted {
		return false
	}
	g.n++
	return true
}

func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n--; g.n == 0 && g.idle.L != nil {
		g.idle.Broadcast()
	}
}

// wait returns once nothing is in the gate.
func (g *gate) wait() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.idle.L == nil {
		g.idle.L = &g.mu
	}
	for g.n > 0 {
		g.idle.Wait()
	}
}

// Stats are the Locker's counts of retries.
type Stats struct {
	// Aborts: a request took longer than T_wait from its last look at its
	// ancestors to its notifications, and started its node over (§3.5.5).
	Aborts uint64
	// Backoffs: a request holding part of its span found the rest taken,
	// let go of everything and started over (see Acquire).
	Backoffs uint64
	// FastPaths: grants of an internal node that skipped step 2(d)'s wait
	// because the request set every bit below it (Config.FastPath).
	FastPaths uint64
	// Promotions: a request starved at a leaf took its parent instead
	// (Config.LeafPatience).
	Promotions uint64
}

// Stats returns the counts so far.
func (lk *Locker) Stats() Stats {
	return Stats{Aborts: lk.aborts.Load(), Backoffs: lk.backoffs.Load(), FastPaths: lk.fastPaths.Load(), Promotions: lk.promotions.Load()}
}

// New returns a Locker for tree on ep.
func New(ep rdma.Endpoint, tree Tree, cfg Config) *Locker {
	cfg.defaults()
	lk := &Locker{ep: ep, tree: tree, cfg: cfg}
	lk.life, lk.kill = context.WithCancel(context.Background())
	return lk
}

// Tree is the tree the Locker locks spans of.
func (lk *Locker) Tree() Tree { return lk.tree }

// Abort ends the Locker: requests in flight give up (ErrAborted) and undo
// what they did, background work stops, and later requests fail at once.
// It returns when none of them will post a verb again. Spans already held
// stay held, and are released as usual. A memory node repairing the tree
// has each user abort its Locker before it zeroes the nodes (the cancelled
// requests' tickets and notifications are then simply gone).
func (lk *Locker) Abort() {
	lk.gate.mu.Lock()
	lk.gate.aborted = true
	lk.gate.mu.Unlock()
	lk.kill()
	lk.gate.wait()
}

// Idle reports whether no request of the Locker is in flight and none of
// its background work (passing on the bakery turn of a request that gave
// up) is left: it will post no verb unless asked to. A user must not let
// go of a tree before its Locker is idle.
func (lk *Locker) Idle() bool {
	lk.gate.mu.Lock()
	defer lk.gate.mu.Unlock()
	return lk.gate.n == 0
}

// WaitIdle returns once the Locker is idle (it may be busy again by then,
// if someone asked it for something meanwhile).
func (lk *Locker) WaitIdle() { lk.gate.wait() }

// settled is the context for a verb that changes the tree: it runs to its
// end whatever happens to the request, since a verb cancelled on its way
// may still be applied, and the request must know what it holds to undo
// it.
func settled(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// uncertain reports a tree-changing verb whose outcome is unknown.
func (lk *Locker) uncertain(err error) {
	if err != nil && lk.cfg.OnUncertain != nil {
		lk.cfg.OnUncertain(err)
	}
}

// Mode is how a span is held.
type Mode int

const (
	// Exclusive spans conflict with every span they overlap.
	Exclusive Mode = iota
	// Shared spans conflict only with overlapping exclusive spans.
	Shared
)

func (m Mode) String() string {
	if m == Shared {
		return "shared"
	}
	return "exclusive"
}

// dmax and dcnt are the notification pair of a request of mode m.
func (m Mode) dmax() rdma.Field {
	if m == Shared {
		return fDMaxS
	}
	return fDMaxX
}

func (m Mode) dcnt() rdma.Field {
	if m == Shared {
		return fDCntS
	}
	return fDCntX
}

// blockedBy reports whether a node word w is occupied in a way a request of
// mode m above or below it must wait for.
func (m Mode) blockedBy(w rdma.U128) bool {
	if m == Shared {
		return get(fX, w) != 0
	}
	return get(fX, w) != 0 || get(fS, w) != 0
}

// Held is a granted range lock.
type Held struct {
	lk    *Locker
	l, r  uint64
	mode  Mode
	nodes []heldNode
	token uint64
}

// Token is the lock's fencing token: of two conflicting grants, the later
// one's is larger. It is one FAA on the tree's counter, taken once every
// node is held: a token taken earlier, with the nodes' atomics, could be
// smaller than that of a request below that the holder then waits out.
func (h *Held) Token() uint64 { return h.token }

type heldNode struct {
	x        uint64
	notified []uint64
	// kids: the fast path set every bit of x's leaf children (FastPath).
	kids bool
}

// Span is the locked span.
func (h *Held) Span() (l, r uint64) { return h.l, h.r }

// Mode is how the span is held.
func (h *Held) Mode() Mode { return h.mode }

// Acquire locks [l, r) in mode m, waiting as long as ctx allows. On an
// error nothing stays locked.
//
// A span of two nodes takes them one after the other. Waiting for the
// second while holding the first can close a cycle that the paper's
// protocol does not break: a holder of an ancestor waits (step 2(d)) for
// requests below it to finish, and one of those, holding its first node,
// waits (step 2(b)) for that ancestor's Occ to clear. So a request that
// holds its first node never waits for its second: if the second is not
// free at once, it lets go of everything, backs off and starts over.
func (lk *Locker) Acquire(ctx context.Context, l, r uint64, m Mode) (*Held, error) {
	return lk.acquire(ctx, l, r, m, false)
}

// TryAcquire is Acquire that does not wait for other holders: it answers
// ErrBusy when a conflicting span is held, or a conflicting request is
// queued ahead of it (a waiting writer keeps new readers of its node out,
// as it would a waiting Acquire). It does wait for what the protocol
// itself takes, T_wait on an internal node, and for requests that are only
// passing through, up to Config.TryPatience. Nothing conflicting held or
// queued: it grants.
func (lk *Locker) TryAcquire(ctx context.Context, l, r uint64, m Mode) (*Held, error) {
	return lk.acquire(ctx, l, r, m, true)
}

// maxTryRounds bounds how often a try starts over after a round that took
// longer than T_wait (inequation 1): that is slowness, not a conflict, so
// the try gives up only once it has started over this often and tryStall
// has passed. A client descheduled under load loses round after round;
// answering busy then would say a span is held that nobody holds.
const maxTryRounds = 8

// tryStall bounds how long a try keeps going against slowness rather than
// a conflict: rounds lost to inequation 1, and a request ahead of it at a
// node that holds the turn while no ancestor is occupied (one on its way,
// only slow). A member that died holding a turn stalls the node until the
// memory node repairs the tree; a try answers busy before that.
const tryStall = time.Second

func (lk *Locker) acquire(ctx context.Context, l, r uint64, m Mode, try bool) (*Held, error) {
	if l >= r || r > lk.tree.Units() {
		return nil, fmt.Errorf("%w: [%d, %d) in [0, %d)", ErrOutOfRange, l, r, lk.tree.Units())
	}
	if !lk.gate.enter() {
		return nil, ErrAborted
	}
	defer lk.gate.leave()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(lk.life, cancel)()
	h, err := lk.acquireNodes(ctx, l, r, m, try)
	if err != nil && lk.life.Err() != nil {
		err = ErrAborted
	}
	return h, err
}

func (lk *Locker) acquireNodes(ctx context.Context, l, r uint64, m Mode, try bool) (*Held, error) {
	nodes := lk.tree.Split(l, r)
	if m == Shared {
		nodes = lk.tree.SplitShared(l, r)
	}
	rq := &request{try: try, start: time.Now()}
	for attempt := 0; ; attempt++ {
		h := &Held{lk: lk, l: l, r: r, mode: m}
		var err error
		failed := 0
		for i, x := range nodes {
			var hn heldNode
			// A try waits for its second node as for its first, only up
			// to its patience: it cannot close a cycle for longer.
			hn, err = lk.lockNode(ctx, rq, x, l, r, m, i > 0 && !try)
			if err != nil {
				failed = i
				break
			}
			h.nodes = append(h.nodes, hn)
		}
		if errors.Is(err, errStarved) {
			// §3.5.4: take the starved leaf's parent instead, and start over.
			if rerr := h.Release(context.WithoutCancel(ctx)); rerr != nil {
				return nil, rerr
			}
			lk.promotions.Add(1)
			nodes = lk.tree.promote(nodes, failed)
			continue
		}
		if err == nil && lk.cfg.NoToken {
			return h, nil
		}
		if err == nil {
			var old uint64
			if old, err = lk.ep.FAA(settled(ctx), lk.tree.fenceAddr(), 1); err == nil {
				h.token = old + 1
				return h, nil
			}
		}
		if rerr := h.Release(context.WithoutCancel(ctx)); rerr != nil {
			return nil, rerr
		}
		if !errors.Is(err, errBusy) {
			return nil, err
		}
		if try {
			// Another attempt would queue again behind what it met.
			return nil, ErrBusy
		}
		lk.backoffs.Add(1)
		d := lk.cfg.Wait / 4 * time.Duration(1+min(attempt, 8))
		if err := lk.sleepUntil(ctx, time.Now().Add(time.Duration(rand.Int64N(int64(d)+1)))); err != nil {
			return nil, err
		}
	}
}

// request is what one acquisition carries through its nodes.
type request struct {
	try    bool
	start  time.Time
	rounds int // rounds started over (inequation 1)
}

// until is the deadline of a wait for another request: none for a request
// that may wait, TryPatience from now for a try.
func (lk *Locker) until(rq *request) time.Time {
	if !rq.try {
		return time.Time{}
	}
	return time.Now().Add(lk.cfg.TryPatience)
}

// errBusy: a request that may not wait found its node taken.
var errBusy = errors.New("rangelock: busy")

// errStarved: a request kept finding a leaf's bits taken for longer than
// Config.LeafPatience.
var errStarved = errors.New("rangelock: starved at a leaf")

// Release unlocks every node of the lock (Algorithm 3), in one batch.
func (h *Held) Release(ctx context.Context) error {
	var b rdma.Batch
	for _, hn := range h.nodes {
		h.lk.unlockOps(&b, hn, h.l, h.r, h.mode)
	}
	h.nodes = nil
	if b.Len() == 0 {
		return nil
	}
	err := h.lk.ep.Post(settled(ctx), &b)
	if err == nil {
		err = b.FirstErr()
	}
	h.lk.uncertain(err)
	return err
}

// Reapply adds to b what the lock put in its tree: the state a repair of
// a zeroed tree must get back for the lock to be released as usual later.
// An internal node a writer holds has its bakery turn taken and not yet
// passed (TMax one ahead of TCnt) and X set; one readers hold has S
// readers and their turns passed; a leaf has its bits; every notified
// ancestor has one more notification of the lock's mode; the fast path's
// leaves below are full.
func (h *Held) Reapply(b *rdma.Batch) {
	t := h.lk.tree
	for _, hn := range h.nodes {
		switch {
		case t.Leaf(hn.x):
			mask := rdma.U64(t.leafMask(hn.x, h.l, h.r))
			b.MaskedCAS128(t.Addr(hn.x), rdma.U128{}, mask, mask, mask)
		case h.mode == Shared:
			b.MaskedFAA128(t.Addr(hn.x), add(fS, 1).Add(add(fTMax, 1)).Add(add(fTCnt, 1)), boundary)
		default:
			b.MaskedFAA128(t.Addr(hn.x), add(fX, 1).Add(add(fTMax, 1)), boundary)
		}
		h.lk.notifyOps(b, hn.notified, h.mode.dmax())
		if hn.kids {
			for i := uint64(0); i < 4; i++ {
				b.MaskedCAS128(t.Addr(child(hn.x, i)), rdma.U128{}, leafFull, leafFull, leafFull)
			}
		}
	}
}

// unlockOps releases node hn: a leaf's bits; a writer's X and its bakery
// turn; a reader's S (it passed its turn on when it occupied the node); and
// the notifications.
func (lk *Locker) unlockOps(b *rdma.Batch, hn heldNode, l, r uint64, m Mode) {
	t := lk.tree
	switch {
	case t.Leaf(hn.x):
		mask := rdma.U64(t.leafMask(hn.x, l, r))
		b.MaskedCAS128(t.Addr(hn.x), mask, mask, rdma.U128{}, mask)
	case m == Shared:
		b.MaskedFAA128(t.Addr(hn.x), neg(fS), boundary)
	default:
		b.MaskedFAA128(t.Addr(hn.x), neg(fX).Add(add(fTCnt, 1)), boundary)
	}
	lk.notifyOps(b, hn.notified, m.dcnt())
	if hn.kids {
		lk.kidsOps(b, hn.x, allKids)
	}
}

// allKids selects all four children for kidsOps.
const allKids = 0b1111

// leafFull is every unit of a leaf.
var leafFull = rdma.U64(^uint64(0))

// kidsOps clears every bit of the leaf children of x that sel selects.
func (lk *Locker) kidsOps(b *rdma.Batch, x uint64, sel int) {
	for i := uint64(0); i < 4; i++ {
		if sel&(1<<i) != 0 {
			b.MaskedCAS128(lk.tree.Addr(child(x, i)), leafFull, leafFull, rdma.U128{}, leafFull)
		}
	}
}

func (lk *Locker) notifyOps(b *rdma.Batch, as []uint64, f rdma.Field) {
	for _, a := range as {
		b.MaskedFAA128(lk.tree.Addr(a), add(f, 1), boundary)
	}
}

// lockNode is Algorithm 2's LOCKNODE, repeated until ACQUIRED, for a
// request of mode m. With noWait it answers errBusy instead of waiting for
// another request; a try waits for one only up to its patience.
func (lk *Locker) lockNode(ctx context.Context, rq *request, x, l, r uint64, m Mode, noWait bool) (heldNode, error) {
	t := lk.tree
	leaf := t.Leaf(x)
	turn := false          // we hold x's bakery turn and must pass it on
	var starving time.Time // a leaf's first failed masked CAS
	var leafPace time.Duration
	fail := func(err error) (heldNode, error) {
		if turn {
			lk.post(func(b *rdma.Batch) { b.MaskedFAA128(t.Addr(x), add(fTCnt, 1), boundary) })
		}
		return heldNode{}, err
	}
	// (a) An internal node is a bakery lock: take a ticket, wait for TCnt
	// to reach it. Readers pass the turn on as soon as they occupy the
	// node, so readers at one node hold it together; a writer keeps it.
	if !leaf {
		old, err := lk.ep.MaskedFAA128(settled(ctx), t.Addr(x), add(fTMax, 1), boundary)
		if err != nil {
			lk.uncertain(err) // a ticket may have been taken that nobody will pass on
			return heldNode{}, err
		}
		ticket := get(fTMax, old)
		if noWait && get(fTCnt, old) != ticket {
			lk.background(func() { lk.passTicket(x, ticket) })
			return heldNode{}, errBusy
		}
		turnCame := func(w rdma.U128) bool { return get(fTCnt, w) == ticket }
		if rq.try {
			// A try gives up at once on a conflicting occupant, and waits a
			// little for a request ahead that has not occupied the node yet.
			turnCame = func(w rdma.U128) bool { return get(fTCnt, w) == ticket || m.blockedBy(w) }
		}
		w, err := lk.poll(ctx, t.Addr(x), lk.until(rq), turnCame)
		for stall := time.Now().Add(tryStall); rq.try && errors.Is(err, errBusy) && time.Now().Before(stall); {
			// The request ahead still holds the turn without occupying x.
			// It may be waiting for an occupied ancestor (a conflict: give
			// up), or only slow on its way, a client descheduled under
			// load: then nothing holds what the try wants, and refusing
			// it would tell its caller something false.
			idle, ierr := lk.ancestorsIdle(ctx, x)
			if ierr != nil {
				err = ierr
			}
			if !idle {
				break
			}
			w, err = lk.poll(ctx, t.Addr(x), lk.until(rq), turnCame)
		}
		if err == nil && get(fTCnt, w) != ticket {
			err = errBusy // a try that met a conflicting occupant
		}
		if err != nil {
			// The ticket is ours whatever happens: pass it on when its
			// turn comes, so the queue behind it moves.
			lk.background(func() { lk.passTicket(x, ticket) })
			return heldNode{}, err
		}
		turn = true
	}
	for {
		// (b) Wait until no ancestor is occupied in a way that conflicts.
		// t1 is when the read that found them free was posted: no
		// ancestor's holder that occupies it later can have started its
		// wait before it.
		t1, err := lk.ancestorsFree(ctx, rq, x, m, noWait || rq.try)
		if err != nil {
			return fail(err)
		}
		// (c) Lock a leaf's bits, or occupy an internal node; (d) notify
		// every M-th ancestor, in the same batch.
		hn := heldNode{x: x, notified: lk.notifyTargets(x)}
		var b rdma.Batch
		mask := rdma.U128{}
		switch {
		case leaf:
			mask = rdma.U64(t.leafMask(x, l, r))
			b.MaskedCAS128(t.Addr(x), rdma.U128{}, mask, mask, mask)
		case m == Shared:
			b.MaskedFAA128(t.Addr(x), add(fS, 1).Add(add(fTCnt, 1)), boundary)
		default:
			b.MaskedFAA128(t.Addr(x), add(fX, 1), boundary)
		}
		lk.notifyOps(&b, hn.notified, m.dmax())
		fast := lk.cfg.FastPath && !leaf && m == Exclusive && t.Leaf(child(x, 0))
		kidsAt := b.Len()
		if fast {
			for i := uint64(0); i < 4; i++ {
				b.MaskedCAS128(t.Addr(child(x, i)), rdma.U128{}, leafFull, leafFull, leafFull)
			}
		}
		if err = lk.ep.Post(settled(ctx), &b); err == nil {
			err = b.FirstErr()
		}
		if err != nil {
			lk.uncertain(err)
			return fail(err)
		}
		if fast {
			set := 0
			for i := 0; i < 4; i++ {
				if b.Old(kidsAt+i).And(leafFull) == (rdma.U128{}) {
					set |= 1 << i
				}
			}
			if lk.cfg.Unsafe == "fast-path-no-check" {
				set = allKids // pretend every bit below was free
			}
			if hn.kids = set == allKids; !hn.kids && set != 0 {
				// Someone below holds units: give back what was taken
				// and go the regular way.
				lk.post(func(b *rdma.Batch) { lk.kidsOps(b, x, set) })
			}
		}
		t0 := time.Now()
		if m == Shared && !leaf {
			turn = false // passed on with S
		}
		if leaf && b.Old(0).And(mask) != (rdma.U128{}) {
			// Some bit is taken: undo the notifications, and look at the
			// ancestors again (they may have been occupied meanwhile).
			lk.post(func(b *rdma.Batch) { lk.notifyOps(b, hn.notified, m.dcnt()) })
			if noWait || rq.try {
				return fail(errBusy)
			}
			if starving.IsZero() {
				starving = t0
			} else if lk.cfg.LeafPatience > 0 && x > 1 && t0.Sub(starving) > lk.cfg.LeafPatience {
				return fail(errStarved)
			}
			if err := lk.pace(ctx, &leafPace); err != nil {
				return fail(err)
			}
			continue
		}
		// A request below an internal node that looked at it before it was
		// occupied must have notified by now, or it aborts (inequation 1).
		if t0.Sub(t1) > time.Duration(float64(lk.cfg.Wait)*(1-lk.cfg.Drift)) {
			lk.aborts.Add(1)
			rq.rounds++
			lk.post(func(b *rdma.Batch) {
				switch {
				case leaf:
					b.MaskedCAS128(t.Addr(x), mask, mask, rdma.U128{}, mask)
				case m == Shared:
					b.MaskedFAA128(t.Addr(x), neg(fS), boundary)
				default: // keep the turn: only X is undone
					b.MaskedFAA128(t.Addr(x), neg(fX), boundary)
				}
				lk.notifyOps(b, hn.notified, m.dcnt())
				if hn.kids {
					lk.kidsOps(b, x, allKids)
				}
			})
			if rq.try && rq.rounds >= maxTryRounds && time.Since(rq.start) > tryStall {
				return fail(errBusy)
			}
			if m == Shared && !leaf {
				// The turn went with S; a reader starts over at (a).
				return lk.lockNode(ctx, rq, x, l, r, m, noWait)
			}
			if err := lk.sleep(ctx); err != nil {
				return fail(err)
			}
			continue
		}
		if leaf {
			return hn, nil
		}
		if hn.kids {
			lk.fastPaths.Add(1)
		}
		// A writer also waits for the readers occupying x itself: they
		// passed the bakery turn on while they hold it.
		if m == Exclusive {
			if err := lk.waitFor(ctx, rq, x, noWait || rq.try, func(w rdma.U128) bool { return get(fS, w) == 0 }); err != nil {
				lk.abandon(hn, m)
				return heldNode{}, err
			}
		}
		// (d) Wait T_wait, then for every request that notified x or an
		// internal node within M levels below it and conflicts with m;
		// unless the fast path holds every unit below x.
		if lk.cfg.Unsafe != "no-descendant-wait" && !hn.kids {
			if err := lk.sleepUntil(ctx, t0.Add(lk.cfg.Wait)); err != nil {
				lk.abandon(hn, m)
				return heldNode{}, err
			}
			if err := lk.descendantsDone(ctx, rq, x, m); err != nil {
				lk.abandon(hn, m)
				return heldNode{}, err
			}
		}
		return hn, nil
	}
}

// notifyTargets are x's ancestors at distances 1, 1+M, 1+2M, ...: whichever
// node above x locks, one of the M levels it checks holds one of them.
func (lk *Locker) notifyTargets(x uint64) []uint64 {
	var out []uint64
	a, dist := parent(x), 1
	for a >= 1 && x > 1 {
		if (dist-1)%lk.cfg.M == 0 {
			out = append(out, a)
		}
		if a == 1 {
			break
		}
		a, dist = parent(a), dist+1
	}
	return out
}

// ancestorsFree returns once one batch of reads of every ancestor of x finds
// none occupied in a way that conflicts with m, with the time that batch was
// posted. While one is, it waits for the lowest such to clear, and looks
// again.
func (lk *Locker) ancestorsFree(ctx context.Context, rq *request, x uint64, m Mode, noWait bool) (time.Time, error) {
	t := lk.tree
	var anc []uint64
	for a := x; a > 1; {
		a = parent(a)
		anc = append(anc, a)
	}
	if len(anc) == 0 {
		return time.Now(), nil
	}
	bufs := make([][NodeSize]byte, len(anc))
	for {
		var b rdma.Batch
		for i, a := range anc {
			b.Read(t.Addr(a), bufs[i][:])
		}
		posted := time.Now()
		if err := lk.ep.Post(ctx, &b); err != nil {
			return time.Time{}, err
		}
		if err := b.FirstErr(); err != nil {
			return time.Time{}, err
		}
		busy := uint64(0)
		for i, a := range anc { // lowest first
			if m.blockedBy(word(bufs[i][:])) {
				busy = a
				break
			}
		}
		if busy == 0 {
			return posted, nil
		}
		if err := lk.waitFor(ctx, rq, busy, noWait, func(w rdma.U128) bool { return !m.blockedBy(w) }); err != nil {
			return time.Time{}, err
		}
	}
}

// ancestorsIdle reads x's ancestors in one batch, and reports whether
// nobody occupies any of them.
func (lk *Locker) ancestorsIdle(ctx context.Context, x uint64) (bool, error) {
	n := 0
	for a := x; a > 1; a = parent(a) {
		n++
	}
	if n == 0 {
		return true, nil
	}
	var b rdma.Batch
	bufs := make([][NodeSize]byte, n)
	for i, a := 0, parent(x); i < n; i, a = i+1, parent(a) {
		b.Read(lk.tree.Addr(a), bufs[i][:])
	}
	if err := lk.ep.Post(ctx, &b); err != nil {
		return false, err
	}
	if err := b.FirstErr(); err != nil {
		return false, err
	}
	for i := range bufs {
		if w := word(bufs[i][:]); get(fX, w) != 0 || get(fS, w) != 0 {
			return false, nil
		}
	}
	return true, nil
}

// descendantsDone waits until x and its internal descendants within M
// levels have no notification outstanding from a request that conflicts
// with m: writers for a reader, everyone for a writer.
func (lk *Locker) descendantsDone(ctx context.Context, rq *request, x uint64, m Mode) error {
	t := lk.tree
	lo, hi := x, x
	until := lk.until(rq)
	var pace time.Duration
	for lvl := 0; lvl < lk.cfg.M && !t.Leaf(lo); lvl++ {
		// the nodes lo..hi are one contiguous block of their level
		n := hi - lo + 1
		buf := make([]byte, NodeSize*n)
		for {
			if err := lk.ep.Read(ctx, t.Addr(lo), buf); err != nil {
				return err
			}
			done := true
			for i := uint64(0); i < n && done; i++ {
				w := word(buf[NodeSize*i:])
				done = get(fDCntX, w) == get(fDMaxX, w) && (m == Shared || get(fDCntS, w) == get(fDMaxS, w))
			}
			if done {
				break
			}
			if !until.IsZero() && time.Now().After(until) {
				return errBusy
			}
			if err := lk.pace(ctx, &pace); err != nil {
				return err
			}
		}
		lo, hi = child(lo, 0), child(hi, 3)
	}
	return nil
}

// abandon releases x after it was occupied, when the wait that follows is
// cut short.
func (lk *Locker) abandon(hn heldNode, m Mode) {
	lk.post(func(b *rdma.Batch) { lk.unlockOps(b, hn, 0, 0, m) })
}

// post issues a batch of undo or release verbs that must not be cancelled
// with the request that needs them.
func (lk *Locker) post(fill func(*rdma.Batch)) {
	var b rdma.Batch
	fill(&b)
	if b.Len() > 0 {
		err := lk.ep.Post(context.Background(), &b)
		if err == nil {
			err = b.FirstErr()
		}
		lk.uncertain(err)
	}
}

// background runs f on a goroutine of its own, counted by the gate: Abort
// waits for it, and stops its waits.
func (lk *Locker) background(f func()) {
	if !lk.gate.enter() {
		return
	}
	go func() {
		defer lk.gate.leave()
		f()
	}()
}

// waitFor polls node x until ok, or answers errBusy at once with noWait
// (after its patience, for a try).
func (lk *Locker) waitFor(ctx context.Context, rq *request, x uint64, noWait bool, ok func(rdma.U128) bool) error {
	if noWait {
		var buf [NodeSize]byte
		if err := lk.ep.Read(ctx, lk.tree.Addr(x), buf[:]); err != nil {
			return err
		}
		if !ok(word(buf[:])) {
			return errBusy
		}
		return nil
	}
	_, err := lk.poll(ctx, lk.tree.Addr(x), lk.until(rq), ok)
	return err
}

// passTicket waits for a ticket whose request gave up, and passes the turn
// on at once (a queued bakery customer cannot leave the queue). Abort
// stops it: the tree is then rebuilt without the ticket.
func (lk *Locker) passTicket(x, ticket uint64) {
	if _, err := lk.poll(lk.life, lk.tree.Addr(x), time.Time{}, func(w rdma.U128) bool { return get(fTCnt, w) == ticket }); err != nil {
		return
	}
	lk.post(func(b *rdma.Batch) { b.MaskedFAA128(lk.tree.Addr(x), add(fTCnt, 1), boundary) })
}

// poll reads a until ok, and returns what it read last; or it answers
// errBusy once until (if not zero) has passed.
func (lk *Locker) poll(ctx context.Context, a rdma.Addr, until time.Time, ok func(rdma.U128) bool) (rdma.U128, error) {
	var buf [NodeSize]byte
	var pace time.Duration
	for {
		if err := lk.ep.Read(ctx, a, buf[:]); err != nil {
			return rdma.U128{}, err
		}
		if w := word(buf[:]); ok(w) {
			return w, nil
		}
		if !until.IsZero() && time.Now().After(until) {
			return rdma.U128{}, errBusy
		}
		if err := lk.pace(ctx, &pace); err != nil {
			return rdma.U128{}, err
		}
	}
}

// pace sleeps *d (Poll the first time) and doubles it, up to PollMax.
func (lk *Locker) pace(ctx context.Context, d *time.Duration) error {
	if *d < lk.cfg.Poll {
		*d = lk.cfg.Poll
	}
	err := lk.sleepUntil(ctx, time.Now().Add(*d))
	*d = min(2**d, lk.cfg.PollMax)
	return err
}

func (lk *Locker) sleep(ctx context.Context) error {
	return lk.sleepUntil(ctx, time.Now().Add(lk.cfg.Poll))
}

func (lk *Locker) sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// word decodes a node read from memory: the low word first.
func word(b []byte) rdma.U128 {
	return rdma.U128{Lo: binary.LittleEndian.Uint64(b), Hi: binary.LittleEndian.Uint64(b[8:])}
}
