package lockmap_test

import (
	"context"
	"fmt"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// A Map is what a proxy keeps: Redis keys and tokens on top of ShiftLock
// entries. Here it runs on a memory node in this process (memfab), as the
// proxy's embedded default does; SET NX PX and the compare-and-delete script
// come down to AcquireKey and Release.
func ExampleMap_AcquireKey() {
	host := memnode.New(memnode.Config{Entries: 1024})
	defer host.Close()
	ep, err := memfab.New(host).Join("proxy-1")
	if err != nil {
		panic(err)
	}
	// The lease is the proxy's promise to the memory node that it is alive:
	// a TTL is only granted within it.
	lease := lockmap.NewLease(ep)
	defer lease.Stop()
	m := lockmap.New([]*lockmap.Domain{{Name: "local", Client: shiftlock.NewClient(ep, shiftlock.Config{}), Lease: lease}}, lockmap.Config{})
	defer m.Close()
	ctx := context.Background()

	// SET orders:42 app-1 NX PX 30000, with no wait budget: a free key is
	// granted at once, with a fencing token.
	fence, ok, err := m.AcquireKey(ctx, "orders:42", "app-1", lockmap.AcquireOptions{Mode: shiftlock.Exclusive, TTL: 30 * time.Second})
	fmt.Println("app-1:", ok, fence, err)

	// A second client tries once and is told no, as redis-server would.
	_, ok, _ = m.AcquireKey(ctx, "orders:42", "app-2", lockmap.AcquireOptions{Mode: shiftlock.Exclusive, TTL: 30 * time.Second})
	fmt.Println("app-2, try once:", ok)

	// With a wait budget it queues in the lock, and app-1's release hands
	// the lock over to it, with a larger fencing token.
	type result struct {
		fence uint64
		ok    bool
	}
	got, queued := make(chan result), make(chan struct{})
	go func() {
		f, ok, _ := m.AcquireKey(ctx, "orders:42", "app-2", lockmap.AcquireOptions{
			Mode: shiftlock.Exclusive, TTL: 30 * time.Second, Wait: 5 * time.Second,
			// Queue is called as the acquire queues behind the holder (the
			// proxy watches the client's socket from then on).
			Queue: func(ctx context.Context) (context.Context, func()) {
				close(queued)
				return ctx, func() {}
			},
		})
		got <- result{f, ok}
	}()
	<-queued
	fmt.Println("app-1 releases:", m.Release("orders:42", "app-1"))
	r := <-got
	fmt.Println("app-2, waiting:", r.ok, r.fence > fence)
	fmt.Println("a stale token releases nothing:", m.Release("orders:42", "app-1"))
	// Output:
	// app-1: true 1 <nil>
	// app-2, try once: false
	// app-1 releases: true
	// app-2, waiting: true true
	// a stale token releases nothing: false
}
