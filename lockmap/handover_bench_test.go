package lockmap_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/lockmap/maptest"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// BenchmarkHandover measures the proxy-internal part of a hot-key cycle:
// from the holder's release to the queued waiter holding the key, on one
// embedded memory node. Two goroutines pass one key back and forth.
func BenchmarkHandover(b *testing.B) {
	host := memnode.New(memnode.Config{Entries: 1 << 10, DeadAfter: time.Hour})
	defer host.Close()
	ep, _ := memfab.New(host).Join("bench")
	m := lockmap.New([]*lockmap.Domain{{Name: "e", Client: shiftlock.NewClient(ep, shiftlock.Config{})}}, lockmap.Config{})
	defer m.Close()
	ctx := context.Background()
	opt := lockmap.AcquireOptions{Mode: shiftlock.Exclusive, TTL: 8 * time.Second, Wait: time.Second}
	tokens := [2]string{"a", "b"}
	if _, ok, _ := m.Acquire(ctx, []string{"hot"}, tokens[0], opt); !ok {
		b.Fatal("setup")
	}
	turn := make(chan int)
	done := make(chan struct{})
	go func() {
		for i := range turn {
			if _, ok, err := m.Acquire(ctx, []string{"hot"}, tokens[i%2], opt); !ok || err != nil {
				b.Error(ok, err)
			}
			done <- struct{}{}
		}
	}()
	var total time.Duration
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		turn <- i                         // the other token queues...
		time.Sleep(20 * time.Microsecond) // ...for real
		start := time.Now()
		m.Release("hot", tokens[(i-1)%2])
		<-done
		total += time.Since(start)
	}
	close(turn)
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "us/handover")
}

// BenchmarkCycle is the lock work of one uncontended SET NX PX plus its
// release, as the proxy's embedded default runs it (memfab, a lease): the
// part of the distinct-keys workload that is the proxy's own.
func BenchmarkCycle(b *testing.B) {
	host := memnode.New(memnode.Config{Entries: 1 << 16, DeadAfter: time.Hour})
	defer host.Close()
	ep, _ := memfab.New(host).Join("bench")
	lease := lockmap.NewLease(ep)
	defer lease.Stop()
	m := lockmap.New([]*lockmap.Domain{{Name: "e", Client: shiftlock.NewClient(ep, shiftlock.Config{}), Lease: lease}}, lockmap.Config{})
	defer m.Close()
	ctx := context.Background()
	opt := lockmap.AcquireOptions{Mode: shiftlock.Exclusive, TTL: 10 * time.Second, Wait: 400 * time.Millisecond}
	keys := make([][]string, 64)
	for i := range keys {
		keys[i] = []string{fmt.Sprintf("tput:%d", i)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := keys[i%len(keys)]
		if _, ok, err := m.Acquire(ctx, k, "tok", opt); !ok || err != nil {
			b.Fatal(ok, err)
		}
		if !m.Release(k[0], "tok") {
			b.Fatal("release")
		}
	}
}

// BenchmarkAcquireManyKeys is one acquire of many keys (a multi-key lock
// script; node-redlock sends one for a resource list), then their release,
// per key. A scan per key for duplicates and for shared entries made it
// quadratic: 16,000 keys took 10 s through a proxy.
func BenchmarkAcquireManyKeys(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			m, _ := maptest.Embedded(b, memnode.Config{Entries: 1 << 22, DeadAfter: time.Hour}, lockmap.Config{})
			ctx := context.Background()
			opt := lockmap.AcquireOptions{Mode: shiftlock.Exclusive, TTL: 10 * time.Second}
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("many:%d", i)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, ok, err := m.Acquire(ctx, keys, "tok", opt); !ok || err != nil {
					b.Fatal(ok, err)
				}
				for _, k := range keys {
					m.Release(k, "tok")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
		})
	}
}
