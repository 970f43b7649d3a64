package bank

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// NativeLocker is the Go ShiftLock client joined directly to one or more
// memory nodes over the TCP soft-NIC: no RESP, no proxy. Read-only
// transactions take shared locks. A client that has to wait is handed the
// lock; Wait bounds that, and a wait that runs out aborts the transaction
// (ShiftLock completes the abandoned wait in the background and releases at
// once).
//
// Keys map to (memory node, entry) with lockmap.Locate, exactly as the proxy
// maps them, so the native locker and the proxy lock the same entries.
// Several keys may share an entry; the locks are taken in ascending
// (memory node, entry) order, each entry once, in the strongest mode wanted
// for it: ordering by account would not be a global order on what is
// actually locked, and taking one entry twice would wait on itself.
type NativeLocker struct {
	doms    []nativeDomain
	entries []uint64
	wait    time.Duration
}

type nativeDomain struct {
	ep     *tcpfab.Endpoint
	client *shiftlock.Client
	lease  *lockmap.Lease
}

// NewNativeLocker joins every memory node in addrs (in the order that places
// keys, as the proxy's -memnode list) and starts heartbeating, without which
// the memory node would declare this node dead.
func NewNativeLocker(ctx context.Context, addrs []string, wait time.Duration) (*NativeLocker, error) {
	if len(addrs) == 0 {
		return nil, errors.New("bank: native locker needs at least one memory node address")
	}
	l := &NativeLocker{wait: wait}
	for _, a := range addrs {
		ep, err := tcpfab.Dial(ctx, a, tcpfab.Config{Name: "bank"})
		if err != nil {
			_ = l.Close()
			return nil, fmt.Errorf("bank: joining memory node %s: %w", a, err)
		}
		c := shiftlock.NewClient(ep, shiftlock.Config{})
		l.doms = append(l.doms, nativeDomain{ep: ep, client: c, lease: lockmap.NewLease(ep)})
		l.entries = append(l.entries, c.Entries())
	}
	return l, nil
}

func (l *NativeLocker) Name() string { return "native" }

type nativeLock struct {
	dom   int
	entry uint64
	mode  Mode
}

// plan turns requests into entry locks in the global (memory node, entry)
// order, merging keys that share an entry.
func (l *NativeLocker) plan(reqs []LockReq) []nativeLock {
	ls := make([]nativeLock, 0, len(reqs))
	for _, r := range reqs {
		d, e := lockmap.Locate(r.Key, l.entries)
		ls = append(ls, nativeLock{d, e, r.Mode})
	}
	slices.SortFunc(ls, func(a, b nativeLock) int {
		return cmp.Or(cmp.Compare(a.dom, b.dom), cmp.Compare(a.entry, b.entry))
	})
	out := ls[:0]
	for _, x := range ls {
		if n := len(out); n > 0 && out[n-1].dom == x.dom && out[n-1].entry == x.entry {
			out[n-1].mode = max(out[n-1].mode, x.mode)
			continue
		}
		out = append(out, x)
	}
	return out
}

// nativeHeld are a transaction's guards, in plan order, and the requests
// they cover (for Fence).
type nativeHeld struct {
	l      *NativeLocker
	reqs   []LockReq
	plan   []nativeLock
	guards []*shiftlock.Guard
}

// Fence is the token of the guard on key's entry.
func (h *nativeHeld) Fence(key string) (uint64, bool) {
	d, e := lockmap.Locate(key, h.l.entries)
	for i, p := range h.plan[:len(h.guards)] {
		if p.dom == d && p.entry == e {
			return h.guards[i].Token(), true
		}
	}
	return 0, false
}

func (l *NativeLocker) Acquire(ctx context.Context, reqs []LockReq) (Held, error) {
	plan := l.plan(reqs)
	held := &nativeHeld{l: l, reqs: reqs, plan: plan, guards: make([]*shiftlock.Guard, 0, len(plan))}
	wctx, cancel := context.WithTimeout(ctx, l.wait)
	defer cancel()
	for _, p := range plan {
		d := l.doms[p.dom]
		var g *shiftlock.Guard
		var err error
		if p.mode == Shared {
			g, err = d.client.AcquireShared(wctx, p.entry)
		} else {
			g, err = d.client.AcquireExclusive(wctx, p.entry)
		}
		if err == nil {
			// A node that cannot prove it is alive may already have been
			// declared dead, and its locks recovered for someone else.
			err = d.lease.Valid()
			if err != nil {
				_ = g.Release(context.WithoutCancel(ctx))
			}
		}
		if err != nil {
			_ = held.Release(context.WithoutCancel(ctx))
			if wctx.Err() != nil {
				return nil, fmt.Errorf("%w: waited %v: %v", ErrNotAcquired, l.wait, err)
			}
			return nil, err
		}
		held.guards = append(held.guards, g)
	}
	return held, nil
}

func (h *nativeHeld) Release(ctx context.Context) error {
	return releaseEach(len(h.guards), func(i int) error { return h.guards[i].Release(ctx) })
}

// Close releases nothing (every transaction releases its own locks); it
// waits briefly for abandoned waits to finish, stops heartbeating and leaves.
func (l *NativeLocker) Close() error {
	var errs []error
	for _, d := range l.doms {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, d.client.Close(ctx))
		cancel()
		d.lease.Stop()
		errs = append(errs, d.ep.Close())
	}
	return errors.Join(errs...)
}
