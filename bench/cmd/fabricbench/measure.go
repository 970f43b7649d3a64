package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// pair is a fabric under test: a issues verbs and Sends, b receives Sends.
type pair struct {
	name string
	a, b rdma.Endpoint
	tgt  rdma.Target
	// serverPID is the memnode process serving a, or 0 when the server (if
	// any) runs in this process and its CPU is already counted here.
	serverPID int
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, int64(10*time.Second), 3) }

func (p pair) worker(g int) *worker {
	return &worker{ep: p.a, to: p.b.Node(), tgt: p.tgt, addr: p.a.Layout().EntryAddr(uint64(g))}
}

// latency issues the verb one at a time and returns the median and p99.
func latency(p pair, v verb, samples int) (med, p99 time.Duration, err error) {
	ctx := context.Background()
	w := p.worker(0)
	for i := 0; i < samples/10+100; i++ { // warm up connections and caches
		if err := v.run(ctx, w); err != nil {
			return 0, 0, err
		}
	}
	h := newHist()
	for i := 0; i < samples; i++ {
		t0 := time.Now()
		if err := v.run(ctx, w); err != nil {
			return 0, 0, err
		}
		_ = h.RecordValue(int64(time.Since(t0)))
	}
	return time.Duration(h.ValueAtQuantile(50)), time.Duration(h.ValueAtQuantile(99)), nil
}

// throughput runs n goroutines issuing the verb back to back and returns
// verbs per second over d, after a warm-up of d/5, and the CPU time per verb
// this process and the memnode process spent meanwhile.
func throughput(p pair, v verb, n int, d time.Duration) (rate float64, cpu, serverCPU time.Duration, err error) {
	ctx := context.Background()
	type slot struct {
		n atomic.Uint64
		_ [56]byte // one cache line per worker: counting must not contend
	}
	counts := make([]slot, n)
	var stop atomic.Bool
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		w := p.worker(g)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c uint64
			for !stop.Load() {
				if err := v.run(ctx, w); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				c++
				counts[g].n.Store(c)
			}
		}()
	}
	sum := func() (t uint64) {
		for i := range counts {
			t += counts[i].n.Load()
		}
		return t
	}
	time.Sleep(d / 5)
	c0, t0, u0, s0 := sum(), time.Now(), procutil.SelfCPU(), memnodeCPU(p.serverPID)
	time.Sleep(d)
	c1, t1, u1, s1 := sum(), time.Now(), procutil.SelfCPU(), memnodeCPU(p.serverPID)
	stop.Store(true)
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return 0, 0, 0, fmt.Errorf("%s x%d: %w", v.name, n, *e)
	}
	verbs := max(c1-c0, 1)
	return float64(c1-c0) / t1.Sub(t0).Seconds(), (u1 - u0) / time.Duration(verbs), (s1 - s0) / time.Duration(verbs), nil
}

// singleCore runs the verb in one goroutine locked to one thread with
// GOMAXPROCS=1, for d, and returns verbs per second.
func singleCore(p pair, v verb, d time.Duration) (float64, error) {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	type res struct {
		rate float64
		err  error
	}
	out := make(chan res)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ctx := context.Background()
		w := p.worker(0)
		for i := 0; i < 100000; i++ {
			if err := v.run(ctx, w); err != nil {
				out <- res{err: err}
				return
			}
		}
		n := 0
		t0 := time.Now()
		for time.Since(t0) < d {
			for j := 0; j < 4096; j++ {
				if err := v.run(ctx, w); err != nil {
					out <- res{err: err}
					return
				}
			}
			n += 4096
		}
		out <- res{rate: float64(n) / time.Since(t0).Seconds()}
	}()
	r := <-out
	if r.err != nil {
		return 0, fmt.Errorf("%s: %w", v.name, r.err)
	}
	return r.rate, nil
}

// memnodeCPU is the CPU the memnode process pid has used, or 0 when there is
// none (the in-process fabric) or /proc cannot tell.
func memnodeCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	d, _ := procutil.ProcCPU(pid)
	return d
}
