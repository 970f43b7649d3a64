package shiftlock_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
	"github.com/shiftlock/shiftlock-proxy/shiftlock/locktest"
)

// lateFAA delays every masked FAA by up to max before it executes, so that
// pipelined RelCnt bumps land after the handovers they belong to: the lag
// Config.PipelineBump must cope with.
type lateFAA struct {
	rdma.Endpoint
	max time.Duration
}

func (e lateFAA) MaskedFAA128(ctx context.Context, a rdma.Addr, add, boundary rdma.U128) (rdma.U128, error) {
	time.Sleep(time.Duration(rand.Int64N(int64(e.max))))
	return e.Endpoint.MaskedFAA128(ctx, a, add, boundary)
}

func newLateCluster(t *testing.T, nodes int, entries uint64, cfg shiftlock.Config, late time.Duration) *cluster {
	return newLateClusterMixed(t, nodes, entries, func(int) shiftlock.Config { return cfg }, late)
}

// newLateClusterMixed gives node i the config cfg(i).
func newLateClusterMixed(t *testing.T, nodes int, entries uint64, cfg func(int) shiftlock.Config, late time.Duration) *cluster {
	t.Helper()
	host := memnode.New(memnode.Config{Entries: entries, DeadAfter: time.Hour})
	t.Cleanup(host.Close)
	cl := &cluster{host: host, fab: memfab.New(host)}
	for i := range nodes {
		ep, err := cl.fab.Join("node")
		if err != nil {
			t.Fatal(err)
		}
		cl.eps = append(cl.eps, ep)
		cl.clients = append(cl.clients, shiftlock.NewClient(lateFAA{ep, late}, cfg(i)))
	}
	return cl
}

func bumpWaits(cl *cluster) (n uint64) {
	for _, c := range cl.clients {
		n += c.Stats().BumpWaits.Load()
	}
	return n
}

// TestPipelinedBumpKeepsExclusionAndFences runs the checker (mutual
// exclusion, and fencing tokens that order conflicting grants) with the
// RelCnt bump off the handover's path, while every FAA lands up to 300 µs
// late, so that closing CASes and epoch flips find RelCnt lagging.
func TestPipelinedBumpKeepsExclusionAndFences(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    locktest.Workload
	}{
		{"write-heavy", locktest.Workload{Workers: 120, Entries: 4, ReadRatio: 0.3, Ops: 120, Seed: 11}},
		{"mixed", locktest.Workload{Workers: 120, Entries: 3, ReadRatio: 0.6, Ops: 120, Seed: 12}},
		{"zipf", locktest.Workload{Workers: 160, Entries: 64, Zipf: 1.2, ReadRatio: 0.5, Ops: 80, Seed: 13}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const threshold = 4
			cl := newLateCluster(t, 4, 128, shiftlock.Config{Threshold: threshold, PipelineBump: true}, 300*time.Microsecond)
			runChecker(t, cl, tc.w, threshold+1)
			t.Logf("%d releases waited for bumps in flight", bumpWaits(cl))
		})
	}
}

// TestPipelinedBumpMixedClients: clients that pipeline and clients that do
// not share the locks. A non-pipelining holder may receive a lock whose
// RelCnt lags, and must cope just the same.
func TestPipelinedBumpMixedClients(t *testing.T) {
	const threshold = 4
	cl := newLateClusterMixed(t, 4, 16, func(i int) shiftlock.Config {
		return shiftlock.Config{Threshold: threshold, PipelineBump: i%2 == 0}
	}, 300*time.Microsecond)
	runChecker(t, cl, locktest.Workload{Workers: 120, Entries: 4, ReadRatio: 0.4, Ops: 120, Seed: 14}, threshold+1)
	var plain uint64
	for i, c := range cl.clients {
		if i%2 == 1 {
			plain += c.Stats().BumpWaits.Load()
		}
	}
	t.Logf("%d releases waited for bumps in flight, %d of them on non-pipelining clients", bumpWaits(cl), plain)
}
