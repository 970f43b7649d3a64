// Package rangelock is CITRON's range lock (FAST '23): exclusive locks on
// spans [l, r) of a fixed space, kept in a quaternary segment tree on a
// memory node and taken with one-sided verbs only. docs/rangelock.md lists
// how this follows the paper and where it departs.
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
	// Unsafe, for tests only, breaks the protocol in the named way so that
	// the checker can be seen to catch it: "no-descendant-wait" skips step
	// 2(d)'s wait for requests below an internal node.
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

	aborts, backoffs atomic.Uint64
}

// Stats are the Locker's counts of retries.
type Stats struct {
	// Aborts: a request took longer than T_wait from its last look at its
	// ancestors to its notifications, and started its node over (§3.5.5).
	Aborts uint64
	// Backoffs: a request holding part of its span found the rest taken,
	// let go of everything and started over (see Acquire).
	Backoffs uint64
}

// Stats returns the counts so far.
func (lk *Locker) Stats() Stats {
	return Stats{Aborts: lk.aborts.Load(), Backoffs: lk.backoffs.Load()}
}

// New returns a Locker for tree on ep.
func New(ep rdma.Endpoint, tree Tree, cfg Config) *Locker {
	cfg.defaults()
	return &Locker{ep: ep, tree: tree, cfg: cfg}
}

// Held is a granted range lock.
type Held struct {
	lk    *Locker
	l, r  uint64
	nodes []heldNode
}

type heldNode struct {
	x        uint64
	notified []uint64
}

// Span is the locked span.
func (h *Held) Span() (l, r uint64) { return h.l, h.r }

// Acquire locks [l, r) exclusively, waiting as long as ctx allows. On an
// error nothing stays locked.
//
// A span of two nodes takes them one after the other. Waiting for the
// second while holding the first can close a cycle that the paper's
// protocol does not break: a holder of an ancestor waits (step 2(d)) for
// requests below it to finish, and one of those, holding its first node,
// waits (step 2(b)) for that ancestor's Occ to clear. So a request that
// holds its first node never waits for its second: if the second is not
// free at once, it lets go of everything, backs off and starts over.
func (lk *Locker) Acquire(ctx context.Context, l, r uint64) (*Held, error) {
	if l >= r || r > lk.tree.Units() {
		return nil, fmt.Errorf("%w: [%d, %d) in [0, %d)", ErrOutOfRange, l, r, lk.tree.Units())
	}
	nodes := lk.tree.Split(l, r)
	for attempt := 0; ; attempt++ {
		h := &Held{lk: lk, l: l, r: r}
		var err error
		for i, x := range nodes {
			var hn heldNode
			hn, err = lk.lockNode(ctx, x, l, r, i > 0)
			if err != nil {
				break
			}
			h.nodes = append(h.nodes, hn)
		}
		if err == nil {
			return h, nil
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

// Release unlocks every node of the lock (Algorithm 3), in one batch.
func (h *Held) Release(ctx context.Context) error {
	var b rdma.Batch
	for _, hn := range h.nodes {
		h.lk.unlockOps(&b, hn, h.l, h.r)
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

func (lk *Locker) unlockOps(b *rdma.Batch, hn heldNode, l, r uint64) {
	t := lk.tree
	if t.Leaf(hn.x) {
		m := t.leafMask(hn.x, l, r)
		b.MaskedCAS64(t.Addr(hn.x), m, m, 0, m)
	} else {
		b.MaskedFAA64(t.Addr(hn.x), add(fOcc, ^uint64(0))+add(fTCnt, 1), boundary)
	}
	for _, a := range hn.notified {
		b.MaskedFAA64(t.Addr(a), add(fDCnt, 1), boundary)
	}
}

// lockNode is Algorithm 2's LOCKNODE, repeated until ACQUIRED. With noWait
// it answers errBusy instead of waiting for another request.
func (lk *Locker) lockNode(ctx context.Context, x, l, r uint64, noWait bool) (heldNode, error) {
	t := lk.tree
	leaf := t.Leaf(x)
	for {
		// (a) An internal node is a bakery lock: take a ticket, wait for
		// TCnt to reach it.
		if !leaf {
			old, err := lk.ep.MaskedFAA64(ctx, t.Addr(x), add(fTMax, 1), boundary)
			if err != nil {
				return heldNode{}, err
			}
			ticket := get(fTMax, old)
			if noWait && get(fTCnt, old) != ticket {
				go lk.passTicket(x, ticket)
				return heldNode{}, errBusy
			}
			if err := lk.poll(ctx, t.Addr(x), func(w uint64) bool { return get(fTCnt, w) == ticket }); err != nil {
				// The ticket is ours whatever happens: pass it on when
				// its turn comes, so the queue behind it moves.
				go lk.passTicket(x, ticket)
				return heldNode{}, err
			}
		}
	again:
		// (b) Wait until no ancestor is occupied. t1 is when the read that
		// found them all free was posted: no ancestor's holder that sets
		// Occ after it can have started its wait before it.
		t1, err := lk.ancestorsFree(ctx, x, noWait)
		if err != nil {
			return heldNode{}, lk.giveUp(x, leaf, err)
		}
		// (c) Lock a leaf's bits, or occupy an internal node; (d) notify
		// every M-th ancestor, in the same batch.
		hn := heldNode{x: x, notified: lk.notifyTargets(x)}
		var b rdma.Batch
		mask := uint64(0)
		if leaf {
			mask = t.leafMask(x, l, r)
			b.MaskedCAS64(t.Addr(x), 0, mask, mask, mask)
		} else {
			b.MaskedFAA64(t.Addr(x), add(fOcc, 1), boundary)
		}
		for _, a := range hn.notified {
			b.MaskedFAA64(t.Addr(a), add(fDMax, 1), boundary)
		}
		if err := lk.ep.Post(ctx, &b); err != nil {
			return heldNode{}, lk.giveUp(x, leaf, err)
		}
		if err := b.FirstErr(); err != nil {
			return heldNode{}, lk.giveUp(x, leaf, err)
		}
		t0 := time.Now()
		if leaf && b.Old64(0)&mask != 0 {
			// Some bit is taken: undo the notifications, look at the
			// ancestors again (they may have been occupied meanwhile).
			lk.undoNotify(hn.notified)
			if noWait {
				return heldNode{}, errBusy
			}
			if err := lk.sleep(ctx); err != nil {
				return heldNode{}, err
			}
			goto again
		}
		// A request below an internal node that looked at it before Occ
		// was set must have notified by now, or it aborts (inequation 1).
		if t0.Sub(t1) > time.Duration(float64(lk.cfg.Wait)*(1-lk.cfg.Drift)) {
			lk.aborts.Add(1)
			var ub rdma.Batch
			if leaf {
				ub.MaskedCAS64(t.Addr(x), mask, mask, 0, mask)
			} else {
				// Keep the ticket: only Occ is undone.
				ub.MaskedFAA64(t.Addr(x), add(fOcc, ^uint64(0)), boundary)
			}
			for _, a := range hn.notified {
				ub.MaskedFAA64(t.Addr(a), add(fDCnt, 1), boundary)
			}
			if err := lk.ep.Post(context.WithoutCancel(ctx), &ub); err != nil {
				return heldNode{}, err
			}
			if err := lk.sleep(ctx); err != nil {
				return heldNode{}, lk.giveUp(x, leaf, err)
			}
			goto again
		}
		if leaf {
			return hn, nil
		}
		// (d) Wait T_wait, then for every request that notified x or an
		// internal node within M levels below it to finish.
		if lk.cfg.Unsafe != "no-descendant-wait" {
			if err := lk.sleepUntil(ctx, t0.Add(lk.cfg.Wait)); err != nil {
				lk.abandon(hn)
				return heldNode{}, err
			}
			if err := lk.descendantsDone(ctx, x); err != nil {
				lk.abandon(hn)
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
// none occupied, with the time that batch was posted. While one is
// occupied it waits for that one's Occ to clear, and looks again.
func (lk *Locker) ancestorsFree(ctx context.Context, x uint64, noWait bool) (time.Time, error) {
	t := lk.tree
	var anc []uint64
	for a := x; a > 1; {
		a = parent(a)
		anc = append(anc, a)
	}
	if len(anc) == 0 {
		return time.Now(), nil
	}
	bufs := make([][8]byte, len(anc))
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
			if get(fOcc, le64(bufs[i][:])) != 0 {
				busy = a
				break
			}
		}
		if busy == 0 {
			return posted, nil
		}
		if noWait {
			return time.Time{}, errBusy
		}
		if err := lk.poll(ctx, t.Addr(busy), func(w uint64) bool { return get(fOcc, w) == 0 }); err != nil {
			return time.Time{}, err
		}
	}
}

// descendantsDone waits until x and its internal descendants within M
// levels have DCnt == DMax: every request that notified them is gone.
func (lk *Locker) descendantsDone(ctx context.Context, x uint64) error {
	t := lk.tree
	lo, hi := x, x
	for lvl := 0; lvl < lk.cfg.M && !t.Leaf(lo); lvl++ {
		// the nodes lo..hi are one contiguous block of level depth(x)+lvl
		n := hi - lo + 1
		buf := make([]byte, 8*n)
		for {
			if err := lk.ep.Read(ctx, t.Addr(lo), buf); err != nil {
				return err
			}
			done := true
			for i := uint64(0); i < n; i++ {
				w := le64(buf[8*i:])
				if get(fDCnt, w) != get(fDMax, w) {
					done = false
					break
				}
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

// giveUp undoes what a request holds on x when it fails before occupying
// it: for an internal node, the ticket it was granted is passed on.
func (lk *Locker) giveUp(x uint64, leaf bool, err error) error {
	if !leaf {
		var b rdma.Batch
		b.MaskedFAA64(lk.tree.Addr(x), add(fTCnt, 1), boundary)
		_ = lk.ep.Post(context.Background(), &b)
	}
	return err
}

// abandon releases x after it was occupied, when the wait for descendants
// is cut short.
func (lk *Locker) abandon(hn heldNode) {
	var b rdma.Batch
	lk.unlockOps(&b, hn, 0, 0)
	_ = lk.ep.Post(context.Background(), &b)
}

func (lk *Locker) undoNotify(as []uint64) {
	if len(as) == 0 {
		return
	}
	var b rdma.Batch
	for _, a := range as {
		b.MaskedFAA64(lk.tree.Addr(a), add(fDCnt, 1), boundary)
	}
	_ = lk.ep.Post(context.Background(), &b)
}

// passTicket waits for a ticket whose request was cancelled, and passes the
// turn on at once (a queued bakery customer cannot leave the queue).
func (lk *Locker) passTicket(x, ticket uint64) {
	ctx := context.Background()
	if err := lk.poll(ctx, lk.tree.Addr(x), func(w uint64) bool { return get(fTCnt, w) == ticket }); err != nil {
		return
	}
	var b rdma.Batch
	b.MaskedFAA64(lk.tree.Addr(x), add(fTCnt, 1), boundary)
	_ = lk.ep.Post(ctx, &b)
}

func (lk *Locker) poll(ctx context.Context, a rdma.Addr, ok func(uint64) bool) error {
	var buf [8]byte
	for {
		if err := lk.ep.Read(ctx, a, buf[:]); err != nil {
			return err
		}
		if ok(le64(buf[:])) {
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

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
