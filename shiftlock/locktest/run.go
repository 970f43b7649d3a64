package locktest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// Workload is one checker run.
type Workload struct {
	// Clients are the lockers, one per simulated node; Workers goroutines
	// are spread over them round-robin.
	Clients []shiftlock.Locker
	Workers int
	// Entries is how many locks are used (0..Entries-1).
	Entries int
	// ReadRatio is the fraction of shared acquisitions.
	ReadRatio float64
	// Zipf, if above 1, skews entry choice (Go's rand.Zipf s parameter).
	Zipf float64
	// Ops per worker, or until Duration passes, whichever is first.
	Ops      int
	Duration time.Duration
	// Hold is how long each critical section lasts (0 = yield once).
	Hold time.Duration
	// CancelRatio is the fraction of acquisitions given a deadline so short
	// that they are likely to be abandoned while queued.
	CancelRatio float64
	Seed        uint64
}

// Result summarises a run.
type Result struct {
	Ops, Abandoned uint64
	Elapsed        time.Duration
}

// Run drives the workload through chk and returns when every worker is done.
// Errors other than abandoned acquisitions end the run.
func Run(ctx context.Context, w Workload, chk *Checker) (Result, error) {
	var res Result
	var ops, abandoned atomic.Uint64
	var wg sync.WaitGroup
	errc := make(chan error, w.Workers)
	deadline := time.Now().Add(w.Duration)
	start := time.Now()
	for i := 0; i < w.Workers; i++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			l := w.Clients[id%len(w.Clients)]
			r := rand.New(rand.NewPCG(w.Seed, uint64(id)))
			var z *rand.Zipf
			if w.Zipf > 1 {
				z = rand.NewZipf(r, w.Zipf, 1, uint64(w.Entries-1))
			}
			for n := 0; (w.Ops == 0 || n < w.Ops) && (w.Duration == 0 || time.Now().Before(deadline)); n++ {
				if ctx.Err() != nil {
					return
				}
				var entry uint64
				if z != nil {
					entry = z.Uint64()
				} else {
					entry = uint64(r.IntN(w.Entries))
				}
				mode := shiftlock.Exclusive
				if r.Float64() < w.ReadRatio {
					mode = shiftlock.Shared
				}
				actx, cancel := ctx, context.CancelFunc(func() {})
				if w.CancelRatio > 0 && r.Float64() < w.CancelRatio {
					actx, cancel = context.WithTimeout(ctx, time.Duration(r.IntN(50))*time.Microsecond)
				}
				// The ticket is taken again when the lock reports that its
				// enqueuing atomic landed, if it does: waits are measured
				// from arrival, not from when this goroutine got around to it.
				ticket := chk.Ask(entry)
				var g shiftlock.Grant
				var err error
				if hl, ok := l.(shiftlock.HookedLocker); ok {
					g, err = hl.AcquireHooked(actx, entry, mode, shiftlock.Hooks{Arrived: func() { ticket = chk.Ask(entry) }})
				} else {
					g, err = l.Acquire(actx, entry, mode)
				}
				cancel()
				if err != nil {
					if actx.Err() != nil && ctx.Err() == nil {
						abandoned.Add(1)
						continue
					}
					if ctx.Err() != nil {
						return
					}
					errc <- fmt.Errorf("worker %d: acquire entry %d %v: %w", id, entry, mode, err)
					return
				}
				chk.Enter(entry, mode == shiftlock.Shared, g.Token(), ticket)
				if w.Hold > 0 {
					Spin(w.Hold)
				} else {
					runtime.Gosched()
				}
				chk.Exit(entry, mode == shiftlock.Shared)
				if err := g.Release(context.Background()); err != nil {
					errc <- fmt.Errorf("worker %d: release entry %d: %w", id, entry, err)
					return
				}
				ops.Add(1)
			}
		}(i)
	}
	wg.Wait()
	close(errc)
	res.Ops, res.Abandoned, res.Elapsed = ops.Load(), abandoned.Load(), time.Since(start)
	for err := range errc {
		return res, err
	}
	return res, nil
}

// Spin holds a critical section for d without giving the processor away
// for short holds, as the paper's clients spin; longer holds sleep.
func Spin(d time.Duration) {
	if d >= 200*time.Microsecond {
		time.Sleep(d)
		return
	}
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		runtime.Gosched()
	}
}
