package rangelock

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

func TestIndexArithmetic(t *testing.T) {
	tr, err := NewTree(rdma.Addr{Region: rdma.RegionRanges}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Units() != 4096 || tr.Nodes() != 85 {
		t.Fatalf("units %d nodes %d", tr.Units(), tr.Nodes())
	}
	for x := uint64(1); x <= tr.Nodes(); x++ {
		lo, hi := tr.Range(x)
		if !tr.Leaf(x) {
			// children split the parent's span in four, in order
			for i := uint64(0); i < 4; i++ {
				c := child(x, i)
				if parent(c) != x {
					t.Fatalf("parent(child(%d,%d)) = %d", x, i, parent(c))
				}
				clo, chi := tr.Range(c)
				if clo != lo+i*(hi-lo)/4 || chi != lo+(i+1)*(hi-lo)/4 {
					t.Fatalf("child %d of %d covers [%d,%d) in [%d,%d)", i, x, clo, chi, lo, hi)
				}
			}
		} else if hi-lo != LeafUnits {
			t.Fatalf("leaf %d covers %d units", x, hi-lo)
		}
	}
	if _, err := NewTree(rdma.Addr{}, MaxDepth+1); err == nil {
		t.Fatal("a tree deeper than 64 bits allows")
	}
}

// Split against brute force: every single node and every disjoint pair that
// covers the span, the least excess wins.
func TestSplitIsOptimal(t *testing.T) {
	tr, _ := NewTree(rdma.Addr{}, 3)
	r := rand.New(rand.NewPCG(1, 2))
	check := func(l, rr uint64) {
		got := tr.Split(l, rr)
		gotEx := uint64(0)
		covered := uint64(0)
		for _, x := range got {
			lo, hi := tr.Range(x)
			a, b := max(lo, l), min(hi, rr)
			if a >= b {
				t.Fatalf("[%d,%d): node %d [%d,%d) covers none of it", l, rr, x, lo, hi)
			}
			covered += b - a
			gotEx += tr.excess(x, l, rr)
		}
		if covered != rr-l || len(got) > 2 || (len(got) == 2 && got[0] >= got[1]) {
			t.Fatalf("[%d,%d): split %v covers %d units", l, rr, got, covered)
		}
		best := ^uint64(0)
		for x := uint64(1); x <= tr.Nodes(); x++ {
			lo, hi := tr.Range(x)
			if lo <= l && rr <= hi {
				best = min(best, tr.excess(x, l, rr))
			}
			for y := x + 1; y <= tr.Nodes(); y++ {
				a, b := tr.Range(x)
				c, d := tr.Range(y)
				if a > c {
					a, b, c, d = c, d, a, b
				}
				// two nodes cover the span together when they are adjacent,
				// reach both ends, and each holds part of it
				if b != c || a > l || d < rr || b <= l || c >= rr {
					continue
				}
				best = min(best, tr.excess(x, l, rr)+tr.excess(y, l, rr))
			}
		}
		if gotEx != best {
			t.Fatalf("[%d,%d): split %v has excess %d, best is %d", l, rr, got, gotEx, best)
		}
	}
	for i := 0; i < 3000; i++ {
		l := r.Uint64N(tr.Units())
		rr := l + 1 + r.Uint64N(tr.Units()-l)
		if i%3 == 0 { // small spans
			rr = min(tr.Units(), l+1+r.Uint64N(200))
		}
		check(l, rr)
	}
	check(0, tr.Units())
	check(0, 1)
	check(tr.Units()-1, tr.Units())
}

func TestLeafMask(t *testing.T) {
	tr, _ := NewTree(rdma.Addr{}, 1) // leaves 2..5 cover 64 units each
	if m := tr.leafMask(2, 0, 64); m != ^uint64(0) {
		t.Fatalf("whole leaf: %x", m)
	}
	if m := tr.leafMask(3, 70, 72); m != 0b1100_0000 {
		t.Fatalf("[70,72) in leaf 3: %b", m)
	}
	if m := tr.leafMask(3, 0, 65); m != 1 {
		t.Fatalf("[0,65) in leaf 3: %b", m)
	}
}

func TestPromote(t *testing.T) {
	tr, _ := NewTree(rdma.Addr{}, 2) // leaves 6..21, their parents 2..5
	for _, c := range []struct {
		in   []uint64
		i    int
		want []uint64
	}{
		{[]uint64{10}, 0, []uint64{3}},
		{[]uint64{10, 11}, 0, []uint64{3}},     // the parent holds the other leaf
		{[]uint64{10, 11}, 1, []uint64{3}},     // 11's parent is also 3: one node
		{[]uint64{5, 10}, 1, []uint64{3, 5}},   // reordered
		{[]uint64{10, 14}, 0, []uint64{3, 14}}, // 14 lies under 4, not 3
	} {
		if got := tr.promote(c.in, c.i); !slices.Equal(got, c.want) {
			t.Errorf("promote(%v, %d) = %v, want %v", c.in, c.i, got, c.want)
		}
	}
}
