package baseline_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/bench/shiftlock/baseline"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
	"github.com/shiftlock/shiftlock-proxy/shiftlock/locktest"
)

type kind struct {
	name string
	mk   func(rdma.Endpoint) shiftlock.Locker
}

// A lease far beyond any stall the race detector causes keeps DSLR's lease
// resets (which assume holders are live and prompt) out of the checker runs;
// they have their own tests.
const checkerLease = 5 * time.Second

var kinds = []kind{
	{"cas-nb", func(ep rdma.Endpoint) shiftlock.Locker { return baseline.NewCAS(ep, baseline.CASConfig{}) }},
	{"cas-b", func(ep rdma.Endpoint) shiftlock.Locker {
		return baseline.NewCAS(ep, baseline.CASConfig{Backoff: true})
	}},
	{"dslr", func(ep rdma.Endpoint) shiftlock.Locker {
		return baseline.NewDSLR(ep, baseline.DSLRConfig{Lease: checkerLease})
	}},
	// COUNT_MAX of 8 makes the overflow reset happen every few grants.
	{"dslr-countmax8", func(ep rdma.Endpoint) shiftlock.Locker {
		return baseline.NewDSLR(ep, baseline.DSLRConfig{Lease: checkerLease, CountMax: 8})
	}},
	{"mcs", func(ep rdma.Endpoint) shiftlock.Locker { return baseline.NewMCS(ep) }},
}

// TestMutualExclusion runs every baseline under the checker: several client
// nodes, hundreds of goroutines, shared and exclusive requests, on a few hot
// entries and on many skewed ones.
func TestMutualExclusion(t *testing.T) {
	shapes := []struct {
		name    string
		entries int
		zipf    float64
	}{
		{"few-entries", 3, 0},
		{"many-entries", 1000, 1.2},
	}
	for _, k := range kinds {
		for _, sh := range shapes {
			t.Run(fmt.Sprintf("%s/%s", k.name, sh.name), func(t *testing.T) {
				cl := newCluster(t, 4, uint64(sh.entries))
				lockers := cl.lockers(k.mk)
				chk := locktest.NewChecker(sh.entries)
				chk.NoTokens = true
				res, err := locktest.Run(ctxT(t), locktest.Workload{
					Clients:   lockers,
					Workers:   200,
					Entries:   sh.entries,
					ReadRatio: 0.5,
					Zipf:      sh.zipf,
					Ops:       100,
					Duration:  3 * time.Second,
					Seed:      7,
				}, chk)
				if err != nil {
					t.Fatal(err)
				}
				if v := chk.Violations(); v != 0 {
					t.Fatalf("%d violations: %v", v, chk.Report())
				}
				if res.Ops == 0 {
					t.Fatal("no acquisitions completed")
				}
				t.Logf("%d cycles in %v", res.Ops, res.Elapsed.Round(time.Millisecond))
				for i := 0; i < sh.entries; i++ {
					w := cl.word(t, uint64(i))
					idle := w == 0
					if strings.HasPrefix(k.name, "dslr") {
						idle = baseline.DSLRIdle(w)
					}
					if !idle {
						t.Errorf("entry %d not idle after the run: %#x", i, w)
					}
				}
				if k.name == "dslr-countmax8" {
					var resets uint64
					for _, l := range lockers {
						resets += l.(*baseline.DSLR).Stats().OverflowResets.Load()
					}
					if resets == 0 {
						t.Error("COUNT_MAX 8 run never reset the word")
					}
				}
			})
		}
	}
}

// TestCheckerCatchesBrokenCAS shows the checker is not vacuous: a CAS lock
// that swaps without comparing lets holders overlap, and the checker says so.
func TestCheckerCatchesBrokenCAS(t *testing.T) {
	cl := newCluster(t, 2, 1)
	lockers := cl.lockers(func(ep rdma.Endpoint) shiftlock.Locker {
		var cfg baseline.CASConfig
		baseline.BreakSkipCompare(&cfg)
		return baseline.NewCAS(ep, cfg)
	})
	chk := locktest.NewChecker(1)
	chk.NoTokens = true
	if _, err := locktest.Run(ctxT(t), locktest.Workload{
		Clients: lockers, Workers: 50, Entries: 1, Ops: 200, Hold: 20 * time.Microsecond, Seed: 1,
	}, chk); err != nil {
		t.Fatal(err)
	}
	if chk.Violations() == 0 {
		t.Fatal("the checker missed overlapping holders of a lock without compare")
	}
	t.Logf("caught %d violations, first: %v", chk.Violations(), chk.Report()[0])
}
