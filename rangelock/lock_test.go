package rangelock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rangelock"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
)

// checkRun has clients lock random spans of one tree, a share of them
// shared, and mark every unit they hold: -1 for a writer, the number of
// readers otherwise. A writer finding a unit marked, or a reader finding a
// writer's mark, is a conflict the lock let through. It returns the
// conflicting units seen and the locks granted.
func checkRun(t *testing.T, cfg rangelock.Config, clients int, shared float64, d time.Duration) (overlaps, inversions, granted int64, stats rangelock.Stats) {
	return checkRunIn(t, cfg, clients, shared, d, 0, 0)
}

// checkRunIn is checkRun with every span starting below hot (0: anywhere),
// to crowd the clients onto a few leaves, and every lock held for at least
// hold: a conflict the lock lets through is seen only while both holders
// hold, which on a loaded machine short holds rarely do at once.
func checkRunIn(t *testing.T, cfg rangelock.Config, clients int, shared float64, d time.Duration, hot uint64, hold time.Duration) (overlaps, inversions, granted int64, stats rangelock.Stats) {
	var hist history
	defer func() { inversions = int64(hist.fenceInversions()) }()
	t.Helper()
	tree, err := rangelock.NewTree(rdma.Addr{Region: rdma.RegionRanges}, 3) // 4096 units, 85 nodes
	if err != nil {
		t.Fatal(err)
	}
	// No heartbeats here: members must not be declared dead.
	host := memnode.New(memnode.Config{Entries: 16, RangeBytes: tree.Bytes(), DeadAfter: time.Hour})
	t.Cleanup(host.Close)
	fab := memfab.New(host)
	units := make([]unit, tree.Units())
	var ov, gr atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	lockers := make([]*rangelock.Locker, clients)
	for c := 0; c < clients; c++ {
		ep, err := fab.Join(fmt.Sprintf("c%d", c))
		if err != nil {
			t.Fatal(err)
		}
		lk := rangelock.New(ep, tree, cfg)
		lockers[c] = lk
		wg.Add(1)
		go func(id int32) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(id), 7))
			for ctx.Err() == nil {
				var l, n uint64
				switch k := r.IntN(100); {
				case k < 2: // the whole space
					l, n = 0, tree.Units()
				case hot > 0 && k < 60: // crowded onto a few leaves
					l, n = r.Uint64N(hot), 1+r.Uint64N(8)
				case hot > 0: // and onto the nodes just above them
					l, n = r.Uint64N(hot), 64+r.Uint64N(193)
				case k < 50: // within about a leaf
					l, n = r.Uint64N(tree.Units()), 1+r.Uint64N(64)
				case k < 85:
					l, n = r.Uint64N(tree.Units()), 1+r.Uint64N(512)
				default:
					l, n = r.Uint64N(tree.Units()), 1+r.Uint64N(tree.Units())
				}
				hi := min(l+n, tree.Units())
				mode := rangelock.Exclusive
				if r.Float64() < shared {
					mode = rangelock.Shared
				}
				h, err := lk.Acquire(ctx, l, hi, mode)
				granted := time.Now()
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("acquire [%d,%d): %v", l, hi, err)
					}
					return // the run is over
				}
				for u := l; u < hi; u++ {
					if !units[u].mark(mode) {
						ov.Add(1)
					}
				}
				if hold > 0 {
					time.Sleep(hold)
				} else if r.IntN(4) == 0 {
					time.Sleep(time.Duration(r.IntN(100)) * time.Microsecond)
				}
				for u := l; u < hi; u++ {
					units[u].unmark(mode)
				}
				hist.add(op{l: l, r: hi, mode: mode, token: h.Token(), granted: granted, released: time.Now()})
				gr.Add(1)
				if err := h.Release(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		}(int32(c + 1))

	}
	wg.Wait()
	for _, lk := range lockers {
		s := lk.Stats()
		stats.Aborts += s.Aborts
		stats.Backoffs += s.Backoffs
		stats.FastPaths += s.FastPaths
		stats.Promotions += s.Promotions
	}
	// Every lock was released: the tree is back to its counters' balance.
	return ov.Load(), 0, gr.Load(), stats
}

// op is one grant as its holder saw it.
type op struct {
	l, r              uint64
	mode              rangelock.Mode
	token             uint64
	granted, released time.Time
}

type history struct {
	mu  sync.Mutex
	ops []op
}

func (h *history) add(o op) {
	h.mu.Lock()
	h.ops = append(h.ops, o)
	h.mu.Unlock()
}

// fenceInversions counts pairs of conflicting grants, one released before
// the other was granted, where the later one's token is not larger.
func (h *history) fenceInversions() int {
	n := 0
	for i, a := range h.ops {
		for _, b := range h.ops[i+1:] {
			if a.r <= b.l || b.r <= a.l || (a.mode == rangelock.Shared && b.mode == rangelock.Shared) {
				continue
			}
			if a.released.Before(b.granted) && a.token >= b.token || b.released.Before(a.granted) && b.token >= a.token {
				n++
			}
		}
	}
	return n
}

// unit counts the holders of one unit by mode.
type unit struct{ writers, readers atomic.Int32 }

// mark records a holder of mode m on u and reports whether that was
// allowed. Of two conflicting holders marking at once, the second to add
// its count sees the first's.
func (u *unit) mark(m rangelock.Mode) bool {
	if m == rangelock.Exclusive {
		return u.writers.Add(1) == 1 && u.readers.Load() == 0
	}
	u.readers.Add(1)
	return u.writers.Load() == 0
}

func (u *unit) unmark(m rangelock.Mode) {
	if m == rangelock.Exclusive {
		u.writers.Add(-1)
	} else {
		u.readers.Add(-1)
	}
}

// TestNoOverlap: many clients, spans from one unit to the whole space, 30%
// shared, and no unit is ever held in conflicting modes at once; the run
// makes progress.
func TestNoOverlap(t *testing.T) {
	// A loaded machine may grant little in one run: under -race this test
	// grants about 120 in 3 s on an idle 2-core VM, and CI saw 99 once. A
	// stuck protocol grants a handful and then nothing, in every run. Every
	// try must be clean.
	var granted int64
	for try := 0; try < 3 && granted < 30; try++ {
		var overlaps, inversions int64
		var st rangelock.Stats
		overlaps, inversions, granted, st = checkRun(t, rangelock.Config{}, 16, 0.3, 3*time.Second)
		t.Logf("granted %d, aborts %d, backoffs %d", granted, st.Aborts, st.Backoffs)
		if overlaps > 0 {
			t.Fatalf("%d units held by two clients at once", overlaps)
		}
		if inversions > 0 {
			t.Fatalf("%d pairs of conflicting grants whose fencing tokens go backwards", inversions)
		}
	}
	if granted < 30 {
		t.Fatalf("only %d locks in 3 s, three times: the protocol is stuck", granted)
	}
}

// TestNoOverlapFastPath: the same with CITRON's fast path (§3.8), which
// must be taken, and a fast path that skips the wait without checking that
// every unit below was free is caught.
func TestNoOverlapFastPath(t *testing.T) {
	// A run on a loaded machine may grant too little to take the fast
	// path; it is tried again, and every try must be free of overlaps.
	var granted int64
	var st rangelock.Stats
	for try := 0; try < 3 && (granted < 20 || st.FastPaths == 0); try++ {
		var overlaps, inversions int64
		overlaps, inversions, granted, st = checkRun(t, rangelock.Config{FastPath: true}, 16, 0.3, 2*time.Second)
		t.Logf("granted %d, fast paths %d, aborts %d, backoffs %d", granted, st.FastPaths, st.Aborts, st.Backoffs)
		if overlaps > 0 || inversions > 0 {
			t.Fatalf("%d units held by two clients at once, %d fencing inversions", overlaps, inversions)
		}
	}
	if granted < 20 || st.FastPaths == 0 {
		t.Fatalf("%d locks, %d through the fast path", granted, st.FastPaths)
	}
	var overlaps int64
	// The broken variant runs where spans of a leaf and of the node above
	// it meet, with holds long enough to meet in time as well (CI once saw
	// 0 overlaps in three runs of short holds under -race on a loaded
	// machine), and again if a loaded machine kept them apart by chance.
	for try := 0; try < 3; try++ {
		overlaps, _, granted, _ = checkRunIn(t, rangelock.Config{FastPath: true, Unsafe: "fast-path-no-check"}, 16, 0.3, 2*time.Second, 512, time.Millisecond)
		t.Logf("broken fast path: %d overlapping units in %d grants", overlaps, granted)
		if overlaps > 0 {
			break
		}
	}
	if overlaps == 0 {
		t.Fatal("the checker did not catch a fast path that ignores the bits below")
	}
}

// TestLeafPromotion: requests that give up on a leaf almost at once and
// take its parent (§3.5.4) keep the spans apart too.
func TestLeafPromotion(t *testing.T) {
	var granted int64
	var st rangelock.Stats
	for try := 0; try < 3 && (granted < 20 || st.Promotions == 0); try++ {
		var overlaps, inversions int64
		overlaps, inversions, granted, st = checkRunIn(t, rangelock.Config{LeafPatience: time.Microsecond, FastPath: true}, 16, 0.3, 2*time.Second, 128, 0)
		t.Logf("granted %d, promotions %d, fast paths %d, backoffs %d", granted, st.Promotions, st.FastPaths, st.Backoffs)
		if overlaps > 0 || inversions > 0 {
			t.Fatalf("%d units held by two clients at once, %d fencing inversions", overlaps, inversions)
		}
	}
	if granted < 20 || st.Promotions == 0 {
		t.Fatalf("%d locks, %d promotions", granted, st.Promotions)
	}
}

// TestBrokenVariantIsCaught: without step 2(d)'s wait for requests below
// it, an internal node's holder overlaps them, and the checker sees it.
func TestBrokenVariantIsCaught(t *testing.T) {
	overlaps, inversions, granted, _ := checkRun(t, rangelock.Config{Unsafe: "no-descendant-wait"}, 16, 0.3, 3*time.Second)
	t.Logf("broken variant: %d overlapping units and %d fencing inversions in %d grants", overlaps, inversions, granted)
	if overlaps == 0 {
		t.Fatal("the checker did not catch the broken variant")
	}
}

func TestOutOfRange(t *testing.T) {
	tree, _ := rangelock.NewTree(rdma.Addr{Region: rdma.RegionRanges}, 1)
	// No heartbeats here: members must not be declared dead.
	host := memnode.New(memnode.Config{Entries: 16, RangeBytes: tree.Bytes(), DeadAfter: time.Hour})
	t.Cleanup(host.Close)
	ep, _ := memfab.New(host).Join("a")
	lk := rangelock.New(ep, tree, rangelock.Config{})
	for _, s := range [][2]uint64{{5, 5}, {6, 5}, {0, tree.Units() + 1}} {
		if _, err := lk.Acquire(context.Background(), s[0], s[1], rangelock.Exclusive); err == nil {
			t.Fatalf("[%d,%d) accepted", s[0], s[1])
		}
	}
}
