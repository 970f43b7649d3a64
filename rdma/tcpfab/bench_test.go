package tcpfab

import (
	"context"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// BenchmarkMaskedCAS128 is one verb round trip over loopback, client and
// server in this process (bench/cmd/fabricbench measures against a real memnode
// process). Allocations are both ends' together.
func BenchmarkMaskedCAS128(b *testing.B) {
	ts := startServer(b, memnode.Config{Entries: 1024, DeadAfter: time.Hour})
	ep := dial(b, ts.addr, "bench")
	ctx := context.Background()
	tail := rdma.NewField(0, 40)
	addr := ep.Layout().EntryAddr(1)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := ep.MaskedCAS128(ctx, addr, rdma.U128{}, rdma.U128{}, tail.Value(uint64(i)), tail.Mask()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMaskedCAS128Parallel has many verbs outstanding on one endpoint.
func BenchmarkMaskedCAS128Parallel(b *testing.B) {
	ts := startServer(b, memnode.Config{Entries: 1024, DeadAfter: time.Hour})
	ep := dial(b, ts.addr, "bench")
	tail := rdma.NewField(0, 40)
	b.SetParallelism(32)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		addr := ep.Layout().EntryAddr(1)
		for i := 0; pb.Next(); i++ {
			if _, err := ep.MaskedCAS128(ctx, addr, rdma.U128{}, rdma.U128{}, tail.Value(uint64(i)), tail.Mask()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSend is one Send and its ack between two endpoints.
func BenchmarkSend(b *testing.B) {
	ts := startServer(b, memnode.Config{Entries: 1024, DeadAfter: time.Hour})
	a, r := dial(b, ts.addr, "a"), dial(b, ts.addr, "b")
	r.Bind(func(rdma.Message) error { return nil })
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := a.Send(ctx, r.Node(), 1, rdma.Payload{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWithDeadline is a verb whose context has a deadline, the usual
// case in the lock layer: leading the read then costs a context.AfterFunc.
func BenchmarkWithDeadline(b *testing.B) {
	ts := startServer(b, memnode.Config{Entries: 1024, DeadAfter: time.Hour})
	ep := dial(b, ts.addr, "bench")
	ctx, cancel := context.WithTimeout(context.Background(), 1<<40)
	defer cancel()
	addr := ep.Layout().EntryAddr(1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ep.FAA(ctx, addr, 1); err != nil {
			b.Fatal(err)
		}
	}
}
