package memnode

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// The range-tree pool. RegionRanges is cut into trees of RangeTreeBytes,
// each a range lock's segment tree (package rangelock): its first word is
// the tree's fencing counter, the rest its nodes. A name that has holders
// or waiters is bound to a tree of its own, so that two names never share
// a node; a name nobody uses has no tree and costs nothing.
//
// The memory node keeps the bindings, with a count of references per
// member: a proxy binds a name when it starts using it (its first acquire)
// and unbinds when it has nothing left on it. A tree whose users all
// unbound is quiescent (every counter balanced, every bit clear), since
// each request undoes what it did before its proxy lets go, so it goes
// back to the pool as it is.
//
// A member that dies (or leaves) while it holds references may have left
// anything in the tree: a node occupied, a ticket never served, a
// notification never balanced. CITRON repairs such leftovers lazily by
// time (§3.10), which needs every request to end within a lease. Here a
// dead member's locks are bounded by its lease horizon instead, as point
// locks are (docs/recovery-design.md), and once the horizon has passed the
// memory node rebuilds the tree: it freezes the live users, zeroes the
// nodes, has each user put back what its held spans put there, and lets
// them go on (rdma.RangeProbe). The fencing counter is never zeroed, so
// fences keep rising. The same repair serves a live member whose verb's
// outcome it cannot know (rdma.RangeRepair).

// rangeBinding is one name bound to one tree.
type rangeBinding struct {
	name [rdma.RangeNameSize]byte
	tree uint64
	refs map[rdma.NodeID]int
	// dead: members that died holding references, with the instant their
	// lease horizon passes; the tree must be repaired once it has.
	dead map[rdma.NodeID]time.Time
	// asked counts repairs asked for by live members (RangeRepair);
	// repaired is the count the last finished repair served.
	asked, repaired uint64
	// repairing: a repair is under way; binds wait (RangeBusy).
	repairing bool
	worker    bool  // a goroutine runs repair for this binding
	round     uint8 // the current repair's round (rdma.RangeProbeEntry)
}

func (b *rangeBinding) needsRepair() bool { return len(b.dead) > 0 || b.asked != b.repaired }

// rangePool is the memory node's pool of trees.
type rangePool struct {
	s         *Server
	treeBytes uint64
	n         uint64

	mu      sync.Mutex
	names   map[[rdma.RangeNameSize]byte]*rangeBinding
	trees   []*rangeBinding // by tree; nil: free
	free    []uint64        // a stack: the tree used last is reused first
	fenceHW uint64          // at or above the fence of every tree given back
}

func newRangePool(s *Server, treeBytes, size uint64) *rangePool {
	if treeBytes == 0 || treeBytes > size {
		treeBytes = size
	}
	p := &rangePool{s: s, treeBytes: treeBytes, n: size / treeBytes, names: map[[rdma.RangeNameSize]byte]*rangeBinding{}}
	p.trees = make([]*rangeBinding, p.n)
	for t := p.n; t > 0; t-- {
		p.free = append(p.free, t-1)
	}
	// A restarted memory node starts every fence above what any previous
	// generation handed out, as its lock table does (Config.RelBase).
	p.fenceHW = s.cfg.RelBase
	if p.fenceHW != 0 {
		var b [8]byte
		putU64(b[:], p.fenceHW)
		for t := uint64(0); t < p.n; t++ {
			_ = s.ranges.Write(t*p.treeBytes, b[:])
		}
	}
	return p
}

// RangeTrees is the number of trees in the pool (0 without RegionRanges).
func (s *Server) RangeTrees() uint64 {
	if s.rng == nil {
		return 0
	}
	return s.rng.n
}

// RangeBound is the number of trees bound to names now.
func (s *Server) RangeBound() int {
	if s.rng == nil {
		return 0
	}
	s.rng.mu.Lock()
	defer s.rng.mu.Unlock()
	return len(s.rng.names)
}

func (p *rangePool) fence(t uint64) uint64 {
	v, _ := p.s.ranges.Load8(t * p.treeBytes)
	return v
}

// maxFence is the largest fence of any tree, for the high-water mark a
// restart starts above.
func (p *rangePool) maxFence() uint64 {
	// fenceHW moves under p.mu, as a tree is freed (maybeFree) while a
	// save runs.
	p.mu.Lock()
	m := p.fenceHW
	p.mu.Unlock()
	// Every state save scans it: one read per tree, without Load8's
	// checks and call, when the region holds the trees and nothing else.
	if p.treeBytes%8 == 0 && p.n*p.treeBytes == p.s.ranges.Size() {
		if v, err := p.s.ranges.MaxWord(0, p.treeBytes); err == nil {
			return max(m, v)
		}
	}
	for t := uint64(0); t < p.n; t++ {
		m = max(m, p.fence(t))
	}
	return m
}

// Range implements rdma.RangeHost.
func (s *Server) Range(ctx context.Context, n rdma.NodeID, req rdma.RangeRequest) (rdma.RangeReply, error) {
	if err := s.Admit(n); err != nil {
		return rdma.RangeReply{}, err
	}
	p := s.rng
	if p == nil {
		return rdma.RangeReply{}, fmt.Errorf("%w: this memory node has no range trees (range_trees is 0)", rdma.ErrBadRequest)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.names[req.Name]
	switch req.Op {
	case rdma.RangeBind:
		if b != nil {
			if b.repairing {
				return rdma.RangeReply{Status: rdma.RangeBusy, RetryAfter: s.cfg.HeartbeatInterval, Reason: "the name's tree is being repaired"}, nil
			}
			b.refs[n]++
			s.stats.RangeBinds.Add(1)
			return rdma.RangeReply{Status: rdma.RangeOK, Tree: b.tree}, nil
		}
		if len(p.free) == 0 {
			s.stats.RangeFull.Add(1)
			return rdma.RangeReply{Status: rdma.RangeFull, Reason: fmt.Sprintf(
				"all %d range trees of this memory node are bound to names that have holders or waiters (raise range_trees on it; a tree comes free when its name's last holder lets go, or a dead holder's lease has passed)", p.n)}, nil
		}
		t := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		if p.fence(t) < p.fenceHW {
			// Fences of a name go on from those of its earlier trees.
			var w [8]byte
			putU64(w[:], p.fenceHW)
			_ = s.ranges.Write(t*p.treeBytes, w[:])
		}
		b = &rangeBinding{name: req.Name, tree: t, refs: map[rdma.NodeID]int{n: 1}, dead: map[rdma.NodeID]time.Time{}}
		p.names[req.Name], p.trees[t] = b, b
		s.stats.RangeBinds.Add(1)
		return rdma.RangeReply{Status: rdma.RangeOK, Tree: t}, nil
	case rdma.RangeUnbind:
		if b == nil || b.tree != req.Tree || b.refs[n] == 0 {
			return rdma.RangeReply{Status: rdma.RangeOK, Tree: req.Tree}, nil // nothing of n's: done already
		}
		if b.refs[n]--; b.refs[n] == 0 {
			delete(b.refs, n)
		}
		p.maybeFree(b)
		return rdma.RangeReply{Status: rdma.RangeOK, Tree: req.Tree}, nil
	case rdma.RangeRepair:
		if b == nil || b.tree != req.Tree {
			return rdma.RangeReply{Status: rdma.RangeOK, Tree: req.Tree}, nil
		}
		b.asked++
		p.startRepair(b)
		return rdma.RangeReply{Status: rdma.RangeOK, Tree: req.Tree}, nil
	}
	return rdma.RangeReply{}, fmt.Errorf("%w: range operation %d", rdma.ErrBadRequest, req.Op)
}

// maybeFree gives b's tree back once nobody uses it and nothing is left to
// repair; p.mu is held.
func (p *rangePool) maybeFree(b *rangeBinding) {
	if len(b.refs) > 0 || b.needsRepair() || b.repairing || b.worker {
		return
	}
	p.fenceHW = max(p.fenceHW, p.fence(b.tree))
	delete(p.names, b.name)
	p.trees[b.tree] = nil
	p.free = append(p.free, b.tree)
}

// died notes that member n is gone, its grants in force until horizon; a
// tree it used is repaired once the horizon has passed. s.mu is held.
func (p *rangePool) died(n rdma.NodeID, horizon time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.names {
		if b.refs[n] == 0 {
			continue
		}
		delete(b.refs, n)
		b.dead[n] = horizon
		p.startRepair(b)
	}
}

// startRepair runs a repair of b unless one runs already; p.mu is held.
func (p *rangePool) startRepair(b *rangeBinding) {
	if b.worker {
		return
	}
	b.worker = true
	go p.repair(b)
}

// repair rebuilds b's tree until nothing is left to repair (see the top of
// this file). Members stay frozen from the first step to the last: a
// rebuilt tree holds exactly the spans its live users hold, and none of
// them acts on it in between.
func (p *rangePool) repair(b *rangeBinding) {
	s := p.s
	retry := s.cfg.HeartbeatInterval
	for {
		p.mu.Lock()
		now := time.Now()
		var wait time.Duration
		waited := make([]rdma.NodeID, 0, len(b.dead))
		for id, h := range b.dead {
			wait = max(wait, h.Sub(now))
			waited = append(waited, id)
		}
		asked := b.asked
		if !b.needsRepair() {
			b.repairing, b.worker = false, false
			p.maybeFree(b)
			p.mu.Unlock()
			return
		}
		if wait > 0 {
			// A dead user's clients may still believe its spans: its
			// leftovers stay until its horizon has passed. Meanwhile the
			// live users go on, and others may start using the name.
			b.repairing = false
			p.mu.Unlock()
			if !s.sleep(wait) {
				return
			}
			continue
		}
		// From here to the end of the round, nobody new starts on the
		// tree: a bind waits (RangeBusy).
		b.repairing = true
		live := make([]rdma.NodeID, 0, len(b.refs))
		for id := range b.refs {
			live = append(live, id)
		}
		p.mu.Unlock()
		sort.Slice(live, func(i, j int) bool { return live[i] < live[j] })

		b.round++
		if !p.step(live, rdma.RangeFreeze, b) || p.anyDead(live) {
			if !s.sleep(retry) {
				return
			}
			continue
		}
		p.zero(b.tree)
		if !p.step(live, rdma.RangeReapply, b) || p.anyDead(live) {
			// Whoever died after the freeze may have put its spans back or
			// not; the next round waits for its horizon and starts over.
			if !s.sleep(retry) {
				return
			}
			continue
		}
		p.mu.Lock()
		for _, id := range waited {
			delete(b.dead, id)
		}
		b.repaired = asked
		p.mu.Unlock()
		s.stats.RangeRepairs.Add(1)
		s.log.Warn("range tree repaired", zap.Uint64("tree", b.tree), zap.String("name", hex.EncodeToString(b.name[:8])),
			zap.Int("dead_users", len(waited)), zap.Int("live_users", len(live)), zap.Uint64("fence", p.fence(b.tree)))
		// Every live user must hear it may go on; one that cannot be
		// reached stays frozen until it can, or dies.
		for _, id := range live {
			for !p.step([]rdma.NodeID{id}, rdma.RangeResume, b) && s.Admit(id) == nil {
				if !s.sleep(retry) {
					return
				}
			}
		}
	}
}

// step asks every member of ids to take one step of the current round of
// a repair of b's tree. A member that died counts as done: the caller
// checks for deaths. Only b's worker changes b.round.
func (p *rangePool) step(ids []rdma.NodeID, step uint8, b *rangeBinding) bool {
	s := p.s
	s.mu.Lock()
	prober := s.prober
	s.mu.Unlock()
	for _, id := range ids {
		if s.Admit(id) != nil {
			continue
		}
		if prober == nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ProbeTimeout)
		h, err := prober.Probe(ctx, id, rdma.RangeProbeEntry(step, b.round, b.tree))
		cancel()
		if err != nil && s.Admit(id) == nil {
			s.log.Info("range repair: member did not answer", zap.Uint16("node", uint16(id)), zap.Uint8("step", step), zap.Error(err))
			return false
		}
		if err == nil && h != rdma.HoldNone {
			return false
		}
	}
	return true
}

func (p *rangePool) anyDead(ids []rdma.NodeID) bool {
	for _, id := range ids {
		if p.s.Admit(id) != nil {
			return true
		}
	}
	return false
}

// zero clears every node of tree t, not its fencing counter. Only words
// that are not zero are written: a tree's pages that were never used stay
// untouched.
func (p *rangePool) zero(t uint64) {
	var buf, zeros [4096]byte
	base, end := t*p.treeBytes+16, (t+1)*p.treeBytes
	for off := base; off < end; off += uint64(len(buf)) {
		n := min(uint64(len(buf)), end-off)
		_ = p.s.ranges.Read(off, buf[:n])
		if !bytes.Equal(buf[:n], zeros[:n]) {
			_ = p.s.ranges.Write(off, zeros[:n])
		}
	}
}

// sleep waits d, or returns false once the server is closing.
func (s *Server) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.stop:
		return false
	case <-t.C:
		return true
	}
}
