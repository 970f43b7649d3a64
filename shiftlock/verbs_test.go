//go:build verbs

package shiftlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
	"github.com/shiftlock/shiftlock-proxy/rdma/verbs"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
	"github.com/shiftlock/shiftlock-proxy/shiftlock/locktest"
)

// verbsCluster joins n client nodes to a real memnode process over RDMA
// queue pairs (rdma/verbs) on the test device.
func verbsCluster(t *testing.T, n int, cfg shiftlock.Config) ([]shiftlock.Locker, []*shiftlock.Client, []*verbs.Endpoint) {
	t.Helper()
	mn := testproc.VerbsMemnode(t, "-entries", "4096", "-dead-after", "10m")
	var ls []shiftlock.Locker
	var cs []*shiftlock.Client
	var eps []*verbs.Endpoint
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		ep, err := verbs.Dial(ctx, mn.Addr, verbs.Config{DeviceConfig: verbs.DeviceConfig{Device: testproc.VerbsDevice(t)},
			Control: tcpfab.Config{Name: "checker"}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		c := shiftlock.NewClient(ep, cfg)
		ls, cs, eps = append(ls, c), append(cs, c), append(eps, ep)
	}
	return ls, cs, eps
}

// TestVerbsMutualExclusion runs ShiftLock's checker with client nodes on
// RDMA queue pairs to a memnode process (soft-RoCE in make test-verbs):
// the lock-table atomics through the memory node's CPU, since the device
// has no extended atomics, and handovers as SENDs between the clients'
// queue pairs. The checker fails on any overlap of an exclusive holder
// with anyone, on a fencing token that does not rise, and on starvation.
func TestVerbsMutualExclusion(t *testing.T) {
	check := func(t *testing.T, eps []*verbs.Endpoint) {
		var w verbs.Wire
		for _, ep := range eps {
			w = w.Add(ep.Wire())
		}
		t.Logf("on the device: %+v", w)
		if w.CPURequests == 0 || w.PeerSends == 0 || w.PeerAcks == 0 || w.Handshakes == 0 {
			t.Fatalf("the run did not use the CPU path and the member queue pairs: %+v", w)
		}
	}
	t.Run("heavy", func(t *testing.T) {
		ls, cs, eps := verbsCluster(t, 4, shiftlock.Config{Threshold: 4})
		runTCPChecker(t, ls, cs, locktest.Workload{
			Workers: 40, Entries: 4, ReadRatio: 0.5, Ops: 20, Seed: 21,
		}, 4+1)
		check(t, eps)
	})
	t.Run("heavy-with-abandons", func(t *testing.T) {
		ls, cs, eps := verbsCluster(t, 3, shiftlock.Config{Threshold: 4})
		runTCPChecker(t, ls, cs, locktest.Workload{
			Workers: 30, Entries: 3, ReadRatio: 0.5, Ops: 20, CancelRatio: 0.3, Seed: 22,
		}, 0)
		check(t, eps)
	})
	t.Run("light", func(t *testing.T) {
		ls, cs, eps := verbsCluster(t, 4, shiftlock.Config{})
		runTCPChecker(t, ls, cs, locktest.Workload{
			Workers: 50, Entries: 1000, Zipf: 1.2, ReadRatio: 0.5, Ops: 15, Seed: 23,
		}, 16+1)
		check(t, eps)
	})
}
