package shiftlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
	"github.com/shiftlock/shiftlock-proxy/shiftlock/locktest"
)

// tcpCluster joins n client nodes to a real memnode process over tcpfab.
func tcpCluster(t *testing.T, n int, cfg shiftlock.Config) ([]shiftlock.Locker, []*shiftlock.Client) {
	t.Helper()
	mn := testproc.Memnode(t, "-entries", "4096", "-dead-after", "1m")
	var ls []shiftlock.Locker
	var cs []*shiftlock.Client
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ep, err := tcpfab.Dial(ctx, mn.Addr, tcpfab.Config{Name: "checker"})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		c := shiftlock.NewClient(ep, cfg)
		ls, cs = append(ls, c), append(cs, c)
	}
	return ls, cs
}

func runTCPChecker(t *testing.T, ls []shiftlock.Locker, cs []*shiftlock.Client, w locktest.Workload, starve uint64) {
	t.Helper()
	chk := locktest.NewChecker(w.Entries)
	chk.StarveBound = starve
	w.Clients = ls
	res, err := locktest.Run(ctxT(t), w, chk)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		st := c.Stats()
		t.Logf("client %d: %d exclusive and %d shared grants, %d waits, %d handovers, %d abandoned, %d resets, %d recovery requests, %d lost",
			i, st.ExclusiveGrants.Load(), st.SharedGrants.Load(), st.Waits.Load(), st.Handovers.Load(), st.Abandoned.Load(),
			st.Resets.Load(), st.RecoveryRequests.Load(), st.Lost.Load())
	}
	for _, c := range cs {
		c.Close(ctxT(t))
	}
	if chk.Violations() != 0 {
		t.Fatalf("%d violations, first: %v", chk.Violations(), chk.Report())
	}
	var sends uint64
	for _, c := range cs {
		sends += c.Endpoint().Counters().Snapshot().Out[rdma.VerbSend]
	}
	t.Logf("%d ops (%d abandoned) in %v; %d handover notifications crossed the network", res.Ops, res.Abandoned, res.Elapsed, sends)
	if sends == 0 {
		t.Fatal("no handover crossed nodes: the test did not exercise the network path")
	}
}

// TestMutualExclusionOverMemnodeProcess runs the checker with client nodes
// joined to a real memnode process over the TCP soft-NIC: heavy contention
// (few entries) with abandoned waits, and light contention (many entries).
func TestMutualExclusionOverMemnodeProcess(t *testing.T) {
	t.Run("heavy", func(t *testing.T) {
		ls, cs := tcpCluster(t, 4, shiftlock.Config{Threshold: 4})
		runTCPChecker(t, ls, cs, locktest.Workload{
			Workers: 160, Entries: 4, ReadRatio: 0.5, Ops: 40, Seed: 11,
		}, 4+1)
	})
	t.Run("heavy-with-abandons", func(t *testing.T) {
		ls, cs := tcpCluster(t, 3, shiftlock.Config{Threshold: 4})
		runTCPChecker(t, ls, cs, locktest.Workload{
			Workers: 90, Entries: 3, ReadRatio: 0.5, Ops: 40, CancelRatio: 0.3, Seed: 12,
		}, 0)
	})
	t.Run("light", func(t *testing.T) {
		ls, cs := tcpCluster(t, 4, shiftlock.Config{})
		runTCPChecker(t, ls, cs, locktest.Workload{
			Workers: 200, Entries: 1000, Zipf: 1.2, ReadRatio: 0.5, Ops: 30, Seed: 13,
		}, 16+1)
	})
}
