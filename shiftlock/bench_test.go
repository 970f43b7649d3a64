package shiftlock_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/internal/keydist"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// BenchmarkVerbsPerCycle reproduces the setup of ShiftLock Fig. 6 on memfab:
// 240 clients on 5 client nodes, 1,000 locks, Zipf-0.99 keys, each client
// acquiring and immediately releasing. It reports fabric verbs per
// acquire-release cycle, read from the endpoints' counters. The paper
// measured 2.01 atomics with 0.36 READs (WI) and 0.20 READs (RI).
//
//	go test -run '^$' -bench VerbsPerCycle -benchtime 200000x ./shiftlock/
func BenchmarkVerbsPerCycle(b *testing.B) {
	for _, wl := range []struct {
		name  string
		reads float64
	}{{"WI", 0.5}, {"RI", 0.95}} {
		for _, bump := range []bool{true, false} {
			name := wl.name
			if !bump {
				name += "-nobump"
			}
			b.Run(name, func(b *testing.B) {
				benchCycles(b, shiftlock.Config{NoHandoverBump: !bump}, wl.reads)
			})
		}
	}
}

func benchCycles(b *testing.B, cfg shiftlock.Config, readRatio float64) {
	const nodes, clients, entries = 5, 240, 1000
	cl := newCluster(b, nodes, entries, cfg)
	zipf := keydist.NewZipf(entries, 0.99)
	snap := func() rdma.Snapshot {
		var s rdma.Snapshot
		for _, ep := range cl.eps {
			s = s.Add(ep.Counters().Snapshot())
		}
		return s
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	before := snap()
	b.ResetTimer()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			c := cl.clients[id%nodes]
			r := rand.New(rand.NewPCG(uint64(id), 99))
			ctx := context.Background()
			for left.Add(-1) >= 0 {
				e := zipf.Next(r)
				m := shiftlock.Exclusive
				if r.Float64() < readRatio {
					m = shiftlock.Shared
				}
				g, err := c.Acquire(ctx, e, m)
				if err != nil {
					b.Error(err)
					return
				}
				if err := g.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	b.StopTimer()
	d := snap().Sub(before)
	n := float64(b.N)
	b.ReportMetric(float64(d.OutAtomics())/n, "atomics/cycle")
	b.ReportMetric(float64(d.Out[rdma.VerbRead])/n, "reads/cycle")
	b.ReportMetric(float64(d.Out[rdma.VerbSend])/n, "sends/cycle")
	b.ReportMetric(n/b.Elapsed().Seconds(), "cycles/s")
	var local, resets, recov, lost, modes uint64
	for _, c := range cl.clients {
		st := c.Stats()
		local += st.LocalSends.Load()
		resets += st.Resets.Load()
		recov += st.RecoveryRequests.Load()
		lost += st.Lost.Load()
		modes += st.ModeChanges.Load()
	}
	b.ReportMetric(float64(local)/n, "localsends/cycle")
	if resets+recov+lost > 0 {
		b.Logf("resets=%d recovery-requests=%d lost=%d modechanges=%d", resets, recov, lost, modes)
	}
}

// BenchmarkUncontendedCycle is one acquire and its release with nobody
// else on the entry, on memfab (no network: the lock's own CPU cost), in
// each mode: ShiftLock's G1 path, one atomic each way.
//
//	go test -run '^$' -bench UncontendedCycle -count 5 ./shiftlock/
func BenchmarkUncontendedCycle(b *testing.B) {
	for _, mode := range []shiftlock.Mode{shiftlock.Exclusive, shiftlock.Shared} {
		b.Run(mode.String(), func(b *testing.B) {
			cl := newCluster(b, 1, 64, shiftlock.Config{})
			c := cl.clients[0]
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				g, err := c.Acquire(ctx, 3, mode)
				if err != nil {
					b.Fatal(err)
				}
				if err := g.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
