package shiftlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// A Client is one ShiftLock client node: a proxy, in this project. Two of
// them share a memory node's lock table through memfab, the in-process
// fabric; each lock is an entry of that table, named by its index. An
// exclusive acquire on a free entry is one atomic; a waiter queues in the
// entry and the holder's release hands the lock to it with one FAA and one
// Send, so the waiter never polls the memory node. A grant's fencing token
// is the entry's release count, so it rises with every exclusive grant (the
// proxy shows clients one more, so that none is 0).
func ExampleClient_AcquireExclusive() {
	host := memnode.New(memnode.Config{Entries: 64, DeadAfter: time.Hour})
	defer host.Close()
	fab := memfab.New(host)
	epA, err := fab.Join("a")
	if err != nil {
		panic(err)
	}
	epB, err := fab.Join("b")
	if err != nil {
		panic(err)
	}
	a, b := shiftlock.NewClient(epA, shiftlock.Config{}), shiftlock.NewClient(epB, shiftlock.Config{})
	ctx := context.Background()
	const entry = 7

	g, err := a.AcquireExclusive(ctx, entry)
	fmt.Println("a holds entry 7:", err == nil, "waited:", g.Waited(), "token:", g.Token())

	// b cannot take it now without waiting...
	_, ok, err := b.TryExclusive(ctx, entry)
	fmt.Println("b, try once:", ok, err)

	// ...so it queues, and a's release hands the lock over.
	handed := make(chan *shiftlock.Guard)
	enqueues := host.Counters().Snapshot().InAtomics()
	go func() {
		g, err := b.AcquireExclusive(ctx, entry)
		if err != nil {
			panic(err)
		}
		handed <- g
	}()
	// Release once b's enqueue (one atomic on the entry) is in the table,
	// so that it is handed the lock rather than finding it free.
	for host.Counters().Snapshot().InAtomics() == enqueues {
		time.Sleep(time.Millisecond)
	}
	if err := g.Release(ctx); err != nil {
		panic(err)
	}
	gb := <-handed
	fmt.Println("b holds entry 7, waited:", gb.Waited(), "token:", gb.Token())
	fmt.Println("b releases:", gb.Release(ctx))
	// Output:
	// a holds entry 7: true waited: false token: 0
	// b, try once: false <nil>
	// b holds entry 7, waited: true token: 1
	// b releases: <nil>
}
