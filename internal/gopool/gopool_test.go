package gopool

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// deep grows the stack by about n KiB.
//
//go:noinline
func deep(n int) int {
	var pad [1024]byte
	pad[n%len(pad)] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return deep(n-1) + int(pad[n%len(pad)])
}

func TestRunsEveryFunctionOnce(t *testing.T) {
	const n = 2000
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := make(map[int]int)
	wg.Add(n)
	for i := 0; i < n; i++ {
		Go(func() {
			defer wg.Done()
			mu.Lock()
			seen[i]++
			mu.Unlock()
		})
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		if seen[i] != 1 {
			t.Fatalf("function %d ran %d times", i, seen[i])
		}
	}
}

// TestBlockingFunctionsDoNotStall checks that Go never waits for a busy
// worker: functions that block until every one of them has started would
// deadlock on a bounded pool.
func TestBlockingFunctionsDoNotStall(t *testing.T) {
	const n = 3 * MaxIdle
	var started, release sync.WaitGroup
	started.Add(n)
	release.Add(1)
	for i := 0; i < n; i++ {
		Go(func() {
			started.Done()
			release.Wait()
		})
	}
	done := make(chan struct{})
	go func() { started.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("functions waiting for each other never all started")
	}
	release.Done()
}

// TestIdleBounded checks that at most MaxIdle goroutines stay behind.
func TestIdleBounded(t *testing.T) {
	const n = 2 * MaxIdle
	var wg sync.WaitGroup
	var gate sync.WaitGroup
	gate.Add(1)
	wg.Add(n)
	for i := 0; i < n; i++ {
		Go(func() { gate.Wait(); wg.Done() })
	}
	gate.Done()
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for Idle() < MaxIdle && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := Idle(); got != MaxIdle {
		t.Fatalf("%d idle goroutines, want %d", got, MaxIdle)
	}
	before := runtime.NumGoroutine()
	wg.Add(n)
	for i := 0; i < n; i++ {
		Go(func() { wg.Done() })
	}
	wg.Wait()
	time.Sleep(10 * time.Millisecond)
	if after := runtime.NumGoroutine(); after > before+1 {
		t.Fatalf("goroutines grew from %d to %d with idle workers available", before, after)
	}
}

// BenchmarkDeep compares a deep call on a fresh goroutine with one on a
// pooled goroutine (what the pool is for).
func BenchmarkDeep(b *testing.B) {
	for _, c := range []struct {
		name string
		run  func(func())
	}{
		{"go", func(f func()) { go f() }},
		{"pool", Go},
	} {
		b.Run(c.name, func(b *testing.B) {
			done := make(chan int)
			for i := 0; i < b.N; i++ {
				c.run(func() { done <- deep(24) })
				<-done
			}
		})
	}
}
