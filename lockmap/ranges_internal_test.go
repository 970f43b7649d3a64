package lockmap

import (
	"context"
	"crypto/sha256"
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
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// TestRangeRepairsUnderLoad: three maps (proxies) on one memory node lock
// spans of two names while repairs of their trees are asked for over and
// over: each freezes all three, zeroes the tree, has every map put back
// what it holds, and lets them go on. No unit of a name is ever held in
// conflicting modes, fences order conflicting grants, tries keep their
// word, and once everything is released every name is unbound.
func TestRangeRepairsUnderLoad(t *testing.T) {
	host := memnode.New(memnode.Config{Entries: 1 << 10, DeadAfter: time.Hour, HeartbeatInterval: 10 * time.Millisecond,
		RangeBytes: 4 * RangeTreeBytes(), RangeTreeBytes: RangeTreeBytes()})
	t.Cleanup(host.Close)
	fab := memfab.New(host)
	var ms []*Map
	for i := 0; i < 3; i++ {
		ep, err := fab.Join(fmt.Sprint("p", i))
		if err != nil {
			t.Fatal(err)
		}
		m := New([]*Domain{{Name: "m", Client: shiftlock.NewClient(ep, shiftlock.Config{})}}, Config{})
		t.Cleanup(m.Close)
		ms = append(ms, m)
	}
	const units = 4096
	names := []string{"r", "s"}
	type unit struct{ w, r atomic.Int32 }
	marks := map[string][]unit{"r": make([]unit, units), "s": make([]unit, units)}
	type grant struct {
		name     string
		l, r     uint64
		shared   bool
		fence    uint64
		from, to time.Time
	}
	var mu sync.Mutex
	var hist []grant
	var bad, granted, tries atomic.Int64
	const wantGrants, wantRepairs = 400, 15
	// A bound on a hang, not a pace: under a loaded CI (other tests beside
	// it, -race) a minute gave 336 of the 400 grants.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < 12; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := ms[w%len(ms)]
			rnd := rand.New(rand.NewPCG(uint64(w), 35))
			for i := 0; ctx.Err() == nil; i++ {
				name := names[rnd.IntN(len(names))]
				l := rnd.Uint64N(units)
				hi := min(l+1+rnd.Uint64N(400), units)
				if rnd.IntN(25) == 0 {
					l, hi = 0, units
				}
				mode := rangelock.Exclusive
				if rnd.IntN(3) == 0 {
					mode = rangelock.Shared
				}
				wait := 100 * time.Millisecond
				if rnd.IntN(4) == 0 {
					wait = 0 // a try
					tries.Add(1)
				}
				tok := fmt.Sprintf("w%d-%d", w, i)
				fence, ok, err := m.RangeAcquire(ctx, name, tok, l, hi, mode, time.Minute, wait)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("acquire: %v", err)
					}
					return
				}
				if !ok {
					continue
				}
				from := time.Now()
				for u := l; u < hi; u++ {
					x := &marks[name][u]
					if mode == rangelock.Shared {
						x.r.Add(1)
						if x.w.Load() != 0 {
							bad.Add(1)
						}
					} else if x.w.Add(1) != 1 || x.r.Load() != 0 {
						bad.Add(1)
					}
				}
				time.Sleep(time.Duration(rnd.IntN(1500)) * time.Microsecond)
				for u := l; u < hi; u++ {
					if mode == rangelock.Shared {
						marks[name][u].r.Add(-1)
					} else {
						marks[name][u].w.Add(-1)
					}
				}
				to := time.Now()
				if !m.RangeRelease(name, tok, l, hi) {
					t.Errorf("release of %s [%d,%d) %s answered 0", name, l, hi, tok)
					return
				}
				granted.Add(1)
				mu.Lock()
				hist = append(hist, grant{name, l, hi, mode == rangelock.Shared, fence, from, to})
				mu.Unlock()
			}
		}()
	}
	// Repairs, asked for by the maps in turn, as after a verb whose outcome
	// was lost.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			time.Sleep(30 * time.Millisecond)
			m := ms[i%len(ms)]
			name := names[i%len(names)]
			m.rng.mu.Lock()
			rn := m.rng.names[name]
			m.rng.mu.Unlock()
			if rn == nil {
				continue
			}
			<-rn.bound
			if rn.err != nil {
				continue
			}
			rc := rn.dom.Client.Endpoint().Control().(rdma.RangeControl)
			if _, err := rc.Range(context.Background(), rdma.RangeRequest{Op: rdma.RangeRepair, Name: sha256.Sum256([]byte(name)), Tree: rn.tree}); err != nil {
				t.Error(err)
				return
			}
			if host.Stats().RangeRepairs.Load() >= wantRepairs && granted.Load() >= wantGrants {
				cancel()
			}
		}
	}()
	wg.Wait()
	t.Logf("%d grants (%d tries asked), %d repairs", granted.Load(), tries.Load(), host.Stats().RangeRepairs.Load())
	if bad.Load() > 0 {
		t.Fatalf("%d units held in conflicting modes at once", bad.Load())
	}
	for i, a := range hist {
		for _, b := range hist[i+1:] {
			if a.name != b.name || a.r <= b.l || b.r <= a.l || (a.shared && b.shared) {
				continue
			}
			if a.to.Before(b.from) && a.fence >= b.fence || b.to.Before(a.from) && b.fence >= a.fence {
				t.Fatalf("fences out of order: %+v then %+v", a, b)
			}
		}
	}
	if granted.Load() < wantGrants || host.Stats().RangeRepairs.Load() < wantRepairs {
		t.Fatalf("only %d grants and %d repairs in 4 minutes", granted.Load(), host.Stats().RangeRepairs.Load())
	}
	// Everything released: every name is unbound, once repairs under way
	// are over.
	deadline := time.Now().Add(10 * time.Second)
	for host.RangeBound() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d trees still bound with nothing held", host.RangeBound())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// And a try on an idle name grants, through every map.
	for _, m := range ms {
		if _, ok, err := m.RangeAcquire(context.Background(), "r", "last", 0, units, rangelock.Exclusive, 0, 0); !ok || err != nil {
			t.Fatalf("a try on an idle name after the repairs: %v %v", ok, err)
		}
		m.RangeRelease("r", "last", 0, units)
	}
}
