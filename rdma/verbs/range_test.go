//go:build verbs

package verbs_test

import (
	"crypto/sha256"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/verbs"
)

// TestVerbsRangeControl: a member on verbs binds range-lock names through
// its endpoint's control path (rdma.RangeControl, over the TCP control
// connection it set its queue pairs up on), as on tcpfab: one tree per
// name, the same for every member, a full pool refused at once, a tree
// free again once its users unbind; and the bound tree's words are
// reached through the fabric (the memory node's CPU, like the lock
// table's): a fence bumped by one member is seen by the other.
func TestVerbsRangeControl(t *testing.T) {
	const treeBytes = 1024
	mn := startMemoryNode(t, memnode.Config{Entries: 64, RangeBytes: 2 * treeBytes, RangeTreeBytes: treeBytes}, verbs.LockTableAuto)
	a, b := join(t, mn.addr, "a"), join(t, mn.addr, "b")
	if m, ok := a.Mechanism(rdma.RegionRanges); !ok || m != verbs.CPU {
		t.Fatalf("the range trees are reached by %v (present %v), want the memory node's CPU", m, ok)
	}
	call := func(ep *verbs.Endpoint, op rdma.RangeOp, name string, tree uint64) rdma.RangeReply {
		t.Helper()
		rc, ok := ep.Control().(rdma.RangeControl)
		if !ok {
			t.Fatalf("a verbs endpoint's control path (%T) has no range control", ep.Control())
		}
		rep, err := rc.Range(ctxT(t), rdma.RangeRequest{Op: op, Name: sha256.Sum256([]byte(name)), Tree: tree})
		if err != nil {
			t.Fatalf("%v %s through node %d: %v", op, name, ep.Node(), err)
		}
		return rep
	}
	xa, xb := call(a, rdma.RangeBind, "x", 0), call(b, rdma.RangeBind, "x", 0)
	if xa.Status != rdma.RangeOK || xb.Status != rdma.RangeOK || xa.Tree != xb.Tree {
		t.Fatalf("one name bound through two members: %+v %+v", xa, xb)
	}
	y := call(a, rdma.RangeBind, "y", 0)
	if y.Status != rdma.RangeOK || y.Tree == xa.Tree {
		t.Fatalf("a second name: %+v (the first has tree %d)", y, xa.Tree)
	}
	if z := call(b, rdma.RangeBind, "z", 0); z.Status != rdma.RangeFull || z.Reason == "" {
		t.Fatalf("a third name on a pool of two trees: %+v, want RangeFull with a reason", z)
	}

	fence := rdma.Addr{Region: rdma.RegionRanges, Offset: xa.Tree * treeBytes}
	before, err := b.FAA(ctxT(t), fence, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.FAA(ctxT(t), fence, 1); err != nil {
		t.Fatal(err)
	}
	if after, err := b.FAA(ctxT(t), fence, 0); err != nil || after != before+1 {
		t.Fatalf("fence of tree %d: %d, then %d after the other member's FAA (%v)", xa.Tree, before, after, err)
	}

	call(a, rdma.RangeUnbind, "x", xa.Tree)
	call(b, rdma.RangeUnbind, "x", xb.Tree)
	if z := call(b, rdma.RangeBind, "z", 0); z.Status != rdma.RangeOK || z.Tree != xa.Tree {
		t.Fatalf("a name after the only other one's users left: %+v, want tree %d", z, xa.Tree)
	}
}
