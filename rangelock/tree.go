package rangelock

import (
	"fmt"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// LeafUnits is the number of units a leaf's bitmap covers (CITRON §3.3).
const LeafUnits = 64

// Tree is the geometry of one lock tree (CITRON §3.3): a quaternary segment
// tree whose leaves are 64-unit bitmaps, its 16-byte nodes in a flat array
// in level order, indexed from 1, so that
//
//	CHILD(x, i) = 4x - 2 + i   (i = 0..3)
//	PARENT(x)   = (x + 2) / 4
//
// The root covers [0, Units()); node x at depth d covers a 1/4^d share.
type Tree struct {
	// Base is the address of the tree's fencing counter; node x is at
	// Base + 16x.
	Base rdma.Addr
	// Depth is the depth of the leaves (the root's is 0).
	Depth int
}

// MaxDepth keeps Units within 64 bits.
const MaxDepth = 28

// NewTree checks the geometry.
func NewTree(base rdma.Addr, depth int) (Tree, error) {
	if depth < 0 || depth > MaxDepth {
		return Tree{}, fmt.Errorf("rangelock: tree depth %d outside 0..%d", depth, MaxDepth)
	}
	if base.Offset%16 != 0 {
		return Tree{}, fmt.Errorf("rangelock: tree base %v is not 16-byte aligned", base)
	}
	return Tree{Base: base, Depth: depth}, nil
}

// Units is the size of the space the tree covers.
func (t Tree) Units() uint64 { return LeafUnits << (2 * uint(t.Depth)) }

// Nodes is the number of nodes, (4^(Depth+1) - 1) / 3.
func (t Tree) Nodes() uint64 { return (1<<(2*uint(t.Depth+1)) - 1) / 3 }

// Bytes is the tree's size in memory: its nodes and its fencing counter.
func (t Tree) Bytes() uint64 { return NodeSize * (t.Nodes() + 1) }

// NodeSize is the size of a node: CITRON's are 8 bytes; shared spans need
// a second word (see the node fields below).
const NodeSize = 16

// Addr is node x's address.
func (t Tree) Addr(x uint64) rdma.Addr {
	return rdma.Addr{Region: t.Base.Region, Offset: t.Base.Offset + NodeSize*x}
}

// fenceAddr is the tree's fencing counter, one word before node 1.
func (t Tree) fenceAddr() rdma.Addr { return t.Base }

// first is the index of the first node at depth d: (4^d + 2) / 3.
func first(d int) uint64 { return (1<<(2*uint(d)) + 2) / 3 }

// depth of node x.
func depth(x uint64) int {
	d := 0
	for first(d+1) <= x {
		d++
	}
	return d
}

func parent(x uint64) uint64 { return (x + 2) / 4 }

func child(x uint64, i uint64) uint64 { return 4*x - 2 + i }

// Leaf reports whether x is a leaf.
func (t Tree) Leaf(x uint64) bool { return depth(x) == t.Depth }

// Range is the span [lo, hi) node x covers.
func (t Tree) Range(x uint64) (lo, hi uint64) {
	d := depth(x)
	size := t.Units() >> (2 * uint(d))
	pos := x - first(d)
	return pos * size, (pos + 1) * size
}

// nodeAt is the node at depth d covering unit u.
func (t Tree) nodeAt(d int, u uint64) uint64 {
	size := t.Units() >> (2 * uint(d))
	return first(d) + u/size
}

// cover is the lowest node covering [l, r), which must be non-empty and
// inside the tree.
func (t Tree) cover(l, r uint64) uint64 {
	d := t.Depth
	for t.nodeAt(d, l) != t.nodeAt(d, r-1) {
		d--
	}
	return t.nodeAt(d, l)
}

// excess is how many units locking node x for [l, r) covers beyond the
// request: a leaf locks exactly the requested bits, an internal node its
// whole span.
func (t Tree) excess(x, l, r uint64) uint64 {
	if t.Leaf(x) {
		return 0
	}
	lo, hi := t.Range(x)
	return (hi - lo) - (min(hi, r) - max(lo, l))
}

// Split picks at most two nodes that together cover [l, r) with the fewest
// units covered but not requested (CITRON §3.5.1 with k = 2). The only
// candidates are the lowest node covering the whole range, and, when the
// range straddles exactly two adjacent children of that node, the lowest
// covers of its two halves: two disjoint nodes inside one child would make
// that child the lowest cover, and a child strictly between them would be
// left uncovered. Nodes are returned in the order they must be locked
// (ascending index, Algorithm 2 line 6).
func (t Tree) Split(l, r uint64) []uint64 {
	c := t.cover(l, r)
	if t.Leaf(c) {
		return []uint64{c}
	}
	lo, _ := t.Range(c)
	size := (t.Units() >> (2 * uint(depth(c)))) / 4
	i, j := (l-lo)/size, (r-1-lo)/size
	if j != i+1 {
		return []uint64{c}
	}
	m := lo + j*size
	a, b := t.cover(l, m), t.cover(m, r)
	if t.excess(a, l, m)+t.excess(b, m, r) >= t.excess(c, l, r) {
		return []uint64{c}
	}
	if a > b {
		a, b = b, a
	}
	return []uint64{a, b}
}

// SplitShared is Split for a shared span, which never locks a leaf: leaf
// bitmaps have one bit per unit, no room for a count of readers. A leaf is
// replaced by its parent, at the cost of covering more units (readers only
// conflict with writers there).
func (t Tree) SplitShared(l, r uint64) []uint64 {
	var out []uint64
	for _, x := range t.Split(l, r) {
		if t.Leaf(x) && x > 1 {
			x = parent(x)
		}
		out = append(out, x)
	}
	if len(out) == 2 {
		a, b := out[0], out[1]
		switch {
		case a == b || t.contains(a, b):
			return out[:1]
		case t.contains(b, a):
			return []uint64{b}
		case a > b:
			return []uint64{b, a}
		}
	}
	return out
}

// promote replaces nodes[i] with its parent (CITRON §3.5.4), dropping a
// node the parent now holds, or the parent if the other node holds it,
// and keeps the nodes in ascending index order.
func (t Tree) promote(nodes []uint64, i int) []uint64 {
	out := append([]uint64(nil), nodes...)
	out[i] = parent(out[i])
	if len(out) == 2 {
		switch {
		case t.contains(out[0], out[1]):
			out = out[:1]
		case t.contains(out[1], out[0]):
			out = out[1:]
		case out[0] > out[1]:
			out[0], out[1] = out[1], out[0]
		}
	}
	return out
}

// contains reports whether node a's span holds node b's.
func (t Tree) contains(a, b uint64) bool {
	alo, ahi := t.Range(a)
	blo, bhi := t.Range(b)
	return alo <= blo && bhi <= ahi
}

// Internal-node fields. CITRON's node (Fig. 3) is one word: a bakery pair
// {TCnt, TMax} for requests at the node, a pair {DCnt, DMax} for
// notifications from below, and the Occ flag. Shared spans need three
// more things (docs/rangelock.md): a count S of readers occupying the node
// beside the writer flag X, and separate notification pairs for readers
// and writers below, since a reader above waits only for writers below. So
// a node is 16 bytes: eight 16-bit fields, updated with 128-bit masked FAA.
// Counters wrap at 2^16 and are only compared for equality.
var (
	fDMaxX = rdma.NewField(0, 16)
	fDCntX = rdma.NewField(16, 16)
	fDMaxS = rdma.NewField(32, 16)
	fDCntS = rdma.NewField(48, 16)
	fTMax  = rdma.NewField(64, 16)
	fTCnt  = rdma.NewField(80, 16)
	fS     = rdma.NewField(96, 16)
	fX     = rdma.NewField(112, 16)

	boundary = rdma.Boundary(fDMaxX, fDCntX, fDMaxS, fDCntS, fTMax, fTCnt, fS, fX)
)

func get(f rdma.Field, w rdma.U128) uint64 { return f.Get(w) }

// add is a masked-FAA operand adding n (mod 2^16) to field f.
func add(f rdma.Field, n uint64) rdma.U128 { return f.Value(n) }

func neg(f rdma.Field) rdma.U128 { return f.Value(^uint64(0)) }

// leafMask is the bitmap of [l, r) within leaf x.
func (t Tree) leafMask(x, l, r uint64) uint64 {
	lo, hi := t.Range(x)
	a, b := max(l, lo)-lo, min(r, hi)-lo
	if b-a == 64 {
		return ^uint64(0)
	}
	return ((uint64(1) << (b - a)) - 1) << a
}
