package lockmap

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Helpers shared by the package's internal and external tests.

// TokT and TokU are tokens long enough for owner recognition
// (MinOwnerToken), as RedLock clients' random values are.
const (
	TokT = "T-5f2c9e81d4a7b3c0"
	TokU = "U-7a1d3f9c02e8b654"
)

// RedLockRounds runs RedLock clients over ms, as a redsync client over one
// pool per proxy: each of workers makes rounds attempts on key "counter",
// asking every map at once with its own token, entering with a majority and
// releasing everywhere. Nobody may be inside twice and no attempt may miss
// its quorum (the wait budget covers the queue); the key must end free.
func RedLockRounds(t *testing.T, ms []*Map, workers, rounds int, ttl, wait time.Duration) {
	t.Helper()
	var inside, maxInside, failed atomic.Int32
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				tok := fmt.Sprintf("redlock-w%03d-r%06d", w, r) // long enough to be recognised
				var n atomic.Int32
				var iw sync.WaitGroup
				for _, m := range ms {
					iw.Add(1)
					go func(m *Map) {
						defer iw.Done()
						if _, ok, err := m.Acquire(context.Background(), []string{"counter"}, tok, AcquireOptions{TTL: ttl, Wait: wait}); err != nil {
							t.Error(err)
						} else if ok {
							n.Add(1)
						}
					}(m)
				}
				iw.Wait()
				if int(n.Load()) > len(ms)/2 {
					if in := inside.Add(1); in > maxInside.Load() {
						maxInside.Store(in)
					}
					time.Sleep(100 * time.Microsecond)
					inside.Add(-1)
				} else {
					failed.Add(1)
				}
				for _, m := range ms {
					m.Release("counter", tok)
				}
			}
		}(w)
	}
	wg.Wait()
	if maxInside.Load() > 1 {
		t.Fatalf("%d clients held the RedLock at once", maxInside.Load())
	}
	if failed.Load() > 0 {
		t.Fatalf("%d of %d attempts missed quorum although the budget covered the queue", failed.Load(), workers*rounds)
	}
	// Released pending places pass the lock on in the background; once
	// they have, the key is free everywhere.
	for _, m := range ms {
		WaitFree(t, m, "counter")
	}
}

// WaitFree waits up to 10 s for key to be free as m sees it.
func WaitFree(t testing.TB, m *Map, key string) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		in, _ := m.Lookup(context.Background(), key)
		if in.State == Free {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s still %v 10s after every release", key, in.State)
		}
	}
}
