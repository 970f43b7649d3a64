package main

import (
	"context"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// worker is one issuing goroutine's state: its own entry and buffers, so
// that workers measure the fabric, not contention on one address.
type worker struct {
	ep   rdma.Endpoint
	to   rdma.NodeID // Send destination
	tgt  rdma.Target
	addr rdma.Addr
	buf  [16]byte
	i    uint64
}

type verb struct {
	name string
	run  func(ctx context.Context, w *worker) error
}

var (
	tail  = rdma.NewField(0, 40)
	cnt   = rdma.NewField(40, 23)
	rel   = rdma.NewField(64, 64)
	bound = rdma.Boundary(tail, cnt, rel)
)

// verbs are what a ShiftLock acquire and release are made of, in the sizes
// the lock uses: 16-byte entries, 8-byte words.
var verbs = []verb{
	{"Read 16B", func(ctx context.Context, w *worker) error { return w.ep.Read(ctx, w.addr, w.buf[:]) }},
	{"Write 16B", func(ctx context.Context, w *worker) error { return w.ep.Write(ctx, w.addr, w.buf[:]) }},
	{"CAS", func(ctx context.Context, w *worker) error {
		w.i++
		_, err := w.ep.CAS(ctx, w.addr, w.i-1, w.i)
		return err
	}},
	{"FAA", func(ctx context.Context, w *worker) error {
		_, err := w.ep.FAA(ctx, w.addr, 1)
		return err
	}},
	{"MaskedCAS 8", func(ctx context.Context, w *worker) error {
		w.i++
		_, err := w.ep.MaskedCAS64(ctx, w.addr, 0, 0, w.i, tail.Mask().Lo)
		return err
	}},
	{"MaskedCAS 16", func(ctx context.Context, w *worker) error {
		w.i++
		_, err := w.ep.MaskedCAS128(ctx, w.addr, rdma.U128{}, rdma.U128{}, tail.Value(w.i), tail.Mask())
		return err
	}},
	{"MaskedFAA 8", func(ctx context.Context, w *worker) error {
		_, err := w.ep.MaskedFAA64(ctx, w.addr, cnt.Value(1).Lo, bound.Lo)
		return err
	}},
	{"MaskedFAA 16", func(ctx context.Context, w *worker) error {
		_, err := w.ep.MaskedFAA128(ctx, w.addr, cnt.Value(1).Or(rel.Value(1)), bound)
		return err
	}},
	{"Send", func(ctx context.Context, w *worker) error {
		return w.ep.Send(ctx, w.to, w.tgt, rdma.Payload{})
	}},
}
