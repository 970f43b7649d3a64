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
}

// ErrOutOfRange: the span is empty or leaves the tree.
var ErrOutOfRange = errors.New("rangelock: span empty or outside the tree")

// Locker takes range locks on one tree through one endpoint.
type Locker struct {
	ep   rdma.Endpoint
	tree Tree
	cfg  Config

	aborts, backoffs, fastPaths, promotions atomic.Uint64
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
	return &Locker{ep: ep, tree: tree, cfg: cfg}
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
	if l >= r || r > lk.tree.Units() {
		return nil, fmt.Errorf("%w: [%d, %d) in [0, %d)", ErrOutOfRange, l, r, lk.tree.Units())
	}
	nodes := lk.tree.Split(l, r)
	if m == Shared {
		nodes = lk.tree.SplitShared(l, r)
	}
	for attempt := 0; ; attempt++ {
		h := &Held{lk: lk, l: l, r: r, mode: m}
		var err error
		failed := 0
		for i, x := range nodes {
			var hn heldNode
			hn, err = lk.lockNode(ctx, x, l, r, m, i > 0)
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
			if old, err = lk.ep.FAA(ctx, lk.tree.fenceAddr(), 1); err == nil {
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
		lk.backoffs.Add(1)
		d := lk.cfg.Wait / 4 * time.Duration(1+min(attempt, 8))
		if err := lk.sleepUntil(ctx, time.Now().Add(time.Duration(rand.Int64N(int64(d)+1)))); err != nil {
			return nil, err
		}
	}
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
	if err := h.lk.ep.Post(ctx, &b); err != nil {
		return err
	}
	return b.FirstErr()
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
// another request.
func (lk *Locker) lockNode(ctx context.Context, x, l, r uint64, m Mode, noWait bool) (heldNode, error) {
	t := lk.tree
	leaf := t.Leaf(x)
	turn := false          // we hold x's bakery turn and must pass it on
	var starving time.Time // a leaf's first failed masked CAS
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
		old, err := lk.ep.MaskedFAA128(ctx, t.Addr(x), add(fTMax, 1), boundary)
		if err != nil {
			return heldNode{}, err
		}
		ticket := get(fTMax, old)
		if noWait && get(fTCnt, old) != ticket {
			go lk.passTicket(x, ticket)
			return heldNode{}, errBusy
		}
		if err := lk.poll(ctx, t.Addr(x), func(w rdma.U128) bool { return get(fTCnt, w) == ticket }); err != nil {
			// The ticket is ours whatever happens: pass it on when its
			// turn comes, so the queue behind it moves.
			go lk.passTicket(x, ticket)
			return heldNode{}, err
		}
		turn = true
	}
	for {
		// (b) Wait until no ancestor is occupied in a way that conflicts.
		// t1 is when the read that found them free was posted: no
		// ancestor's holder that occupies it later can have started its
		// wait before it.
		t1, err := lk.ancestorsFree(ctx, x, m, noWait)
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
		if err = lk.ep.Post(ctx, &b); err == nil {
			err = b.FirstErr()
		}
		if err != nil {
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
			if noWait {
				return fail(errBusy)
			}
			if starving.IsZero() {
				starving = t0
			} else if lk.cfg.LeafPatience > 0 && x > 1 && t0.Sub(starving) > lk.cfg.LeafPatience {
				return fail(errStarved)
			}
			if err := lk.sleep(ctx); err != nil {
				return fail(err)
			}
			continue
		}
		// A request below an internal node that looked at it before it was
		// occupied must have notified by now, or it aborts (inequation 1).
		if t0.Sub(t1) > time.Duration(float64(lk.cfg.Wait)*(1-lk.cfg.Drift)) {
			lk.aborts.Add(1)
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
			if m == Shared && !leaf {
				// The turn went with S; a reader starts over at (a).
				return lk.lockNode(ctx, x, l, r, m, noWait)
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
			if err := lk.waitFor(ctx, x, noWait, func(w rdma.U128) bool { return get(fS, w) == 0 }); err != nil {
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
			if err := lk.descendantsDone(ctx, x, m); err != nil {
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
func (lk *Locker) ancestorsFree(ctx context.Context, x uint64, m Mode, noWait bool) (time.Time, error) {
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
		if err := lk.waitFor(ctx, busy, noWait, func(w rdma.U128) bool { return !m.blockedBy(w) }); err != nil {
			return time.Time{}, err
		}
	}
}

// descendantsDone waits until x and its internal descendants within M
// levels have no notification outstanding from a request that conflicts
// with m: writers for a reader, everyone for a writer.
func (lk *Locker) descendantsDone(ctx context.Context, x uint64, m Mode) error {
	t := lk.tree
	lo, hi := x, x
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
			if err := lk.sleep(ctx); err != nil {
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
		_ = lk.ep.Post(context.Background(), &b)
	}
}

// waitFor polls node x until ok, or answers errBusy at once with noWait.
func (lk *Locker) waitFor(ctx context.Context, x uint64, noWait bool, ok func(rdma.U128) bool) error {
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
	return lk.poll(ctx, lk.tree.Addr(x), ok)
}

// passTicket waits for a ticket whose request was cancelled, and passes the
// turn on at once (a queued bakery customer cannot leave the queue).
func (lk *Locker) passTicket(x, ticket uint64) {
	ctx := context.Background()
	if err := lk.poll(ctx, lk.tree.Addr(x), func(w rdma.U128) bool { return get(fTCnt, w) == ticket }); err != nil {
		return
	}
	lk.post(func(b *rdma.Batch) { b.MaskedFAA128(lk.tree.Addr(x), add(fTCnt, 1), boundary) })
}

func (lk *Locker) poll(ctx context.Context, a rdma.Addr, ok func(rdma.U128) bool) error {
	var buf [NodeSize]byte
	for {
		if err := lk.ep.Read(ctx, a, buf[:]); err != nil {
			return err
		}
		if ok(word(buf[:])) {
			return nil
		}
		if err := lk.sleep(ctx); err != nil {
			return err
		}
	}
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
