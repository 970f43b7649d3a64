package bank

import (
	"context"
	"sync"
)

// parallel calls f on [lo, hi) batches of [0, n), at most workers at a time,
// in ascending order of lo per worker, and returns the first error (which
// stops the batches not yet started).
func parallel(ctx context.Context, workers int, n, batch uint64, f func(ctx context.Context, lo, hi uint64) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		next  uint64
		first error
		wg    sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				lo := next
				next += batch
				mu.Unlock()
				if lo >= n {
					return
				}
				if err := f(ctx, lo, min(lo+batch, n)); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
