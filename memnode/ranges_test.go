package memnode_test

import (
	"context"
	"crypto/sha256"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
)

// treeBytes is a small tree for these tests: a fence word and 63 nodes.
const treeBytes = 1024

func rangeHost(t *testing.T, cfg memnode.Config, trees int) (*memnode.Server, *memfab.Fabric) {
	t.Helper()
	cfg.Entries = 16
	cfg.RangeBytes, cfg.RangeTreeBytes = uint64(trees)*treeBytes, treeBytes
	if cfg.DeadAfter == 0 {
		cfg.DeadAfter = time.Hour // nobody dies unless a test says so
	}
	host := memnode.New(cfg)
	t.Cleanup(host.Close)
	return host, memfab.New(host)
}

func rangeCall(t *testing.T, ep rdma.Endpoint, op rdma.RangeOp, name string, tree uint64) rdma.RangeReply {
	t.Helper()
	rep, err := ep.Control().(rdma.RangeControl).Range(context.Background(), rdma.RangeRequest{Op: op, Name: sha256.Sum256([]byte(name)), Tree: tree})
	if err != nil {
		t.Fatalf("%v %s: %v", op, name, err)
	}
	return rep
}

func fenceOf(t *testing.T, ep rdma.Endpoint, tree uint64) uint64 {
	t.Helper()
	v, err := ep.FAA(context.Background(), rdma.Addr{Region: rdma.RegionRanges, Offset: tree * treeBytes}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRangePool: a name is bound to a tree of its own while it has users,
// the same one for every user; a pool with every tree bound refuses a new
// name at once, saying so; a tree whose users all left is free again, and
// a name's fences go on from its earlier trees' wherever it lands.
func TestRangePool(t *testing.T) {
	host, fab := rangeHost(t, memnode.Config{}, 2)
	a, _ := fab.Join("a")
	b, _ := fab.Join("b")
	ra := rangeCall(t, a, rdma.RangeBind, "x", 0)
	rb := rangeCall(t, b, rdma.RangeBind, "x", 0)
	if ra.Status != rdma.RangeOK || rb.Status != rdma.RangeOK || ra.Tree != rb.Tree {
		t.Fatalf("one name through two members: %+v %+v", ra, rb)
	}
	ry := rangeCall(t, a, rdma.RangeBind, "y", 0)
	if ry.Status != rdma.RangeOK || ry.Tree == ra.Tree {
		t.Fatalf("a second name shares a tree: %+v %+v", ra, ry)
	}
	full := rangeCall(t, b, rdma.RangeBind, "z", 0)
	if full.Status != rdma.RangeFull || !strings.Contains(full.Reason, "all 2 range trees") || !strings.Contains(full.Reason, "range_trees") {
		t.Fatalf("a third name on two trees: %+v", full)
	}
	// Grants on x's tree move its fence.
	if _, err := a.FAA(context.Background(), rdma.Addr{Region: rdma.RegionRanges, Offset: ra.Tree * treeBytes}, 1000); err != nil {
		t.Fatal(err)
	}
	rangeCall(t, a, rdma.RangeUnbind, "x", ra.Tree)
	if st := rangeCall(t, b, rdma.RangeBind, "z", 0); st.Status != rdma.RangeFull {
		t.Fatalf("a tree came free while a user still had it: %+v", st)
	}
	rangeCall(t, b, rdma.RangeUnbind, "x", ra.Tree)
	rangeCall(t, a, rdma.RangeUnbind, "x", ra.Tree) // a second unbind is nothing
	if host.RangeBound() != 1 {
		t.Fatalf("%d trees bound, want 1", host.RangeBound())
	}
	// y goes too; x comes back on whichever tree, fences above 1000.
	rangeCall(t, a, rdma.RangeUnbind, "y", ry.Tree)
	rz := rangeCall(t, b, rdma.RangeBind, "z", 0)
	rx := rangeCall(t, b, rdma.RangeBind, "x", 0)
	if rz.Status != rdma.RangeOK || rx.Status != rdma.RangeOK {
		t.Fatalf("binds after the pool emptied: %+v %+v", rz, rx)
	}
	for _, r := range []rdma.RangeReply{rz, rx} {
		if f := fenceOf(t, b, r.Tree); f < 1000 {
			t.Fatalf("tree %d starts its fences at %d, below a freed tree's 1000", r.Tree, f)
		}
	}
}

// TestRangeFencesStartAboveRelBase: a restarted memory node starts every
// tree's fence above the previous generations' high-water mark, and counts
// the trees' fences in the mark it saves.
func TestRangeFencesStartAboveRelBase(t *testing.T) {
	dir := t.TempDir()
	// Solo: the restart owes the first run only its horizons, none here.
	cfg := open(t, dir, memnode.Config{RangeTreeBytes: treeBytes, RangeBytes: 2 * treeBytes, Entries: 16, DeadAfter: time.Hour, HeartbeatInterval: 10 * time.Millisecond, Solo: true})
	host, _, ep := joinOne(t, cfg)
	// A fence far above any RelCnt: the saved mark must follow it.
	if _, err := ep.FAA(context.Background(), rdma.Addr{Region: rdma.RegionRanges, Offset: treeBytes}, 5<<40); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for cfg.Store.Get().RelHighWater < 5<<40 {
		if time.Now().After(deadline) {
			t.Fatalf("saved high water %d, a tree's fence %d", cfg.Store.Get().RelHighWater, uint64(5<<40))
		}
		time.Sleep(20 * time.Millisecond)
	}
	host.Close()
	_, _, ep2 := joinOne(t, open(t, dir, memnode.Config{RangeTreeBytes: treeBytes, RangeBytes: 2 * treeBytes, Entries: 16, DeadAfter: time.Hour, Solo: true}))
	for tree := uint64(0); tree < 2; tree++ {
		if f := fenceOf(t, ep2, tree); f <= 5<<40 {
			t.Fatalf("after a restart tree %d starts at %d, not above %d", tree, f, uint64(5<<40))
		}
	}
}

// prober records the steps of repairs members are asked to take, answering
// each with what answer says.
type prober struct {
	mu     sync.Mutex
	steps  map[rdma.NodeID][]uint8
	answer func(n rdma.NodeID, step uint8) rdma.Hold
	inner  rdma.Prober
}

func (p *prober) Probe(ctx context.Context, n rdma.NodeID, entry uint64) (rdma.Hold, error) {
	step, _, _, ok := rdma.ParseRangeProbe(entry)
	if !ok {
		return p.inner.Probe(ctx, n, entry)
	}
	p.mu.Lock()
	p.steps[n] = append(p.steps[n], step)
	answer := p.answer
	p.mu.Unlock()
	if answer != nil {
		return answer(n, step), nil
	}
	return rdma.HoldNone, nil
}

func (p *prober) of(n rdma.NodeID) []uint8 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]uint8(nil), p.steps[n]...)
}

// TestRangeRepairAfterDeath: a member that leaves with a reference to a
// name is repaired away once its lease horizon has passed, not before: the
// live users are frozen, the tree's nodes zeroed (its fence kept), the
// users put back what they hold and resume; the name's tree stays bound
// to them, and a tree only the departed member used goes back to the pool.
func TestRangeRepairAfterDeath(t *testing.T) {
	host, fab := rangeHost(t, memnode.Config{HeartbeatInterval: 10 * time.Millisecond}, 2)
	p := &prober{steps: map[rdma.NodeID][]uint8{}, inner: fab}
	host.SetProber(p)
	a, _ := fab.Join("a")
	b, _ := fab.Join("b")
	const horizon = 400 * time.Millisecond
	hb := rdma.StartHeartbeat(a, func() time.Duration { return horizon }, nil)
	shared := rangeCall(t, a, rdma.RangeBind, "shared", 0)
	rangeCall(t, b, rdma.RangeBind, "shared", 0)
	alone := rangeCall(t, a, rdma.RangeBind, "alone", 0)
	// Leftovers of a's: the nodes of both trees dirty, the fences moved.
	for _, tree := range []uint64{shared.Tree, alone.Tree} {
		base := tree * treeBytes
		if err := a.Write(context.Background(), rdma.Addr{Region: rdma.RegionRanges, Offset: base + 16}, []byte{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.FAA(context.Background(), rdma.Addr{Region: rdma.RegionRanges, Offset: base}, 77); err != nil {
			t.Fatal(err)
		}
	}
	// A beat the memory node has publishes the horizon (on a loaded host
	// the periodic ones may not have come yet).
	if err := hb.Push(context.Background(), horizon); err != nil {
		t.Fatal(err)
	}
	hb.Stop()
	// The horizon runs from the last beat, not from the leave: a repair
	// 393 ms after the leave with a 400 ms horizon is right if that beat
	// came 7 ms before it.
	lastBeat, _ := hb.Published()
	_ = a.Close() // leaves: buried with its horizon
	// Nothing happens before the horizon.
	time.Sleep(horizon / 2)
	if steps := p.of(b.Node()); len(steps) != 0 {
		t.Fatalf("repair steps %v before the departed member's horizon", steps)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(p.of(b.Node())) < 3 || host.RangeBound() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no repair: steps %v, %d bound", p.of(b.Node()), host.RangeBound())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if since := time.Since(lastBeat); since < horizon {
		t.Fatalf("repaired %v after the member's last beat, with a %v horizon", since, horizon)
	}
	if got := p.of(b.Node()); len(got) != 3 || got[0] != rdma.RangeFreeze || got[1] != rdma.RangeReapply || got[2] != rdma.RangeResume {
		t.Fatalf("steps %v, want freeze, reapply, resume", got)
	}
	for _, tree := range []uint64{shared.Tree, alone.Tree} {
		var buf [8]byte
		if err := b.Read(context.Background(), rdma.Addr{Region: rdma.RegionRanges, Offset: tree*treeBytes + 16}, buf[:]); err != nil {
			t.Fatal(err)
		}
		if buf != [8]byte{} {
			t.Fatalf("tree %d not zeroed: %v", tree, buf)
		}
		if f := fenceOf(t, b, tree); f != 77 {
			t.Fatalf("tree %d fence %d after the repair, want 77", tree, f)
		}
	}
	// "shared" is still b's: a new member binds it to the same tree.
	c, _ := fab.Join("c")
	if r := rangeCall(t, c, rdma.RangeBind, "shared", 0); r.Status != rdma.RangeOK || r.Tree != shared.Tree {
		t.Fatalf("after the repair: %+v, want tree %d", r, shared.Tree)
	}
	if r := rangeCall(t, c, rdma.RangeBind, "new", 0); r.Status != rdma.RangeOK || r.Tree != alone.Tree {
		t.Fatalf("the departed member's own tree was not freed: %+v", r)
	}
}

// TestRangeRepairAsked: a live member that lost track of a verb asks for a
// repair; a member that cannot freeze yet is asked again, and nobody
// resumes before everyone put its spans back.
func TestRangeRepairAsked(t *testing.T) {
	host, fab := rangeHost(t, memnode.Config{HeartbeatInterval: 10 * time.Millisecond}, 1)
	a, _ := fab.Join("a")
	b, _ := fab.Join("b")
	var refused int
	p := &prober{steps: map[rdma.NodeID][]uint8{}, inner: fab}
	p.answer = func(n rdma.NodeID, step uint8) rdma.Hold {
		if n == b.Node() && step == rdma.RangeFreeze && refused < 2 {
			refused++
			return rdma.HoldActive // a bind on its way
		}
		return rdma.HoldNone
	}
	host.SetProber(p)
	r := rangeCall(t, a, rdma.RangeBind, "n", 0)
	rangeCall(t, b, rdma.RangeBind, "n", 0)
	if rep := rangeCall(t, a, rdma.RangeRepair, "n", r.Tree); rep.Status != rdma.RangeOK {
		t.Fatalf("repair request: %+v", rep)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(p.of(a.Node())) == 0 || p.of(a.Node())[len(p.of(a.Node()))-1] != rdma.RangeResume {
		if time.Now().After(deadline) {
			t.Fatalf("no repair: a %v b %v", p.of(a.Node()), p.of(b.Node()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	ga, gb := p.of(a.Node()), p.of(b.Node())
	last := func(s []uint8, v uint8) int {
		for i := len(s) - 1; i >= 0; i-- {
			if s[i] == v {
				return i
			}
		}
		return -1
	}
	if refused != 2 || last(gb, rdma.RangeReapply) < 0 || last(ga, rdma.RangeReapply) < 0 {
		t.Fatalf("steps a %v b %v (refused %d)", ga, gb, refused)
	}
	if host.Stats().RangeRepairs.Load() != 1 {
		t.Fatalf("%d repairs", host.Stats().RangeRepairs.Load())
	}
	// While the repair ran, binds were told to wait; now they are served.
	c, _ := fab.Join("c")
	if rep := rangeCall(t, c, rdma.RangeBind, "n", 0); rep.Status != rdma.RangeOK || rep.Tree != r.Tree {
		t.Fatalf("bind after the repair: %+v", rep)
	}
}
