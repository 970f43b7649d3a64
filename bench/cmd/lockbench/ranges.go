package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shiftlock/shiftlock-proxy/bench/shiftlock/baseline"
	"github.com/shiftlock/shiftlock-proxy/rangelock"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// Range-lock runs (CITRON §4.2): each cycle locks [x, x+L) where x, the
// left border, follows -keys over [0, N-L] and L is the client's range
// size (-range-sizes; with several, the clients take them in turn, as
// CITRON's mixed workload gives each size a third of the threads). The
// locks: citron (package rangelock, without fencing tokens, as the paper)
// and ss, static segmentation (CITRON Table 1): the space cut into
// -ss-segment units, each a DSLR lock in the lock table, a range taking
// every segment it touches in ascending order.

func isRangeLock(kind string) bool { return kind == "citron" || kind == "ss" }

// parseSizes reads -range-sizes: a comma-separated list of span lengths.
func parseSizes(s string) ([]uint64, error) {
	if s == "" {
		return nil, nil
	}
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil || v == 0 {
			return nil, fmt.Errorf("-range-sizes %q: want positive integers, comma-separated", s)
		}
		out = append(out, v)
	}
	return out, nil
}

// rangeTree is the run's tree: in RegionRanges at offset 0.
func rangeTree(o options) rangelock.Tree {
	t, _ := rangelock.NewTree(rdma.Addr{Region: rdma.RegionRanges}, o.rangeDepth)
	return t
}

// rangeDomain is how many left borders there are: N - maxL + 1.
func rangeDomain(o options) uint64 {
	return rangeTree(o).Units() - o.maxRangeSize() + 1
}

type rangeSizeKey struct{}

// withRangeSize gives a client's context its span length.
func withRangeSize(ctx context.Context, l uint64) context.Context {
	return context.WithValue(ctx, rangeSizeKey{}, l)
}

func rangeSize(ctx context.Context) uint64 {
	if l, ok := ctx.Value(rangeSizeKey{}).(uint64); ok {
		return l
	}
	return 1
}

// citronLocker runs CITRON through lockbench's Locker interface: the entry
// is the span's left border.
type citronLocker struct {
	lk      *rangelock.Locker
	entries uint64
}

func (c citronLocker) Entries() uint64 { return c.entries }

func (c citronLocker) Acquire(ctx context.Context, l uint64, m shiftlock.Mode) (shiftlock.Grant, error) {
	mode := rangelock.Exclusive
	if m == shiftlock.Shared {
		mode = rangelock.Shared
	}
	h, err := c.lk.Acquire(ctx, l, l+rangeSize(ctx), mode)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// ssLocker is static segmentation over DSLR.
type ssLocker struct {
	d       *baseline.DSLR
	seg     uint64
	entries uint64
}

func (s ssLocker) Entries() uint64 { return s.entries }

func (s ssLocker) Acquire(ctx context.Context, l uint64, m shiftlock.Mode) (shiftlock.Grant, error) {
	r := l + rangeSize(ctx)
	var g ssGrant
	for seg := l / s.seg; seg <= (r-1)/s.seg; seg++ {
		h, err := s.d.Acquire(ctx, seg, m)
		if err != nil {
			_ = g.Release(context.WithoutCancel(ctx))
			return nil, err
		}
		g = append(g, h)
	}
	return g, nil
}

type ssGrant []shiftlock.Grant

func (g ssGrant) Token() uint64 { return 0 }

func (g ssGrant) Release(ctx context.Context) error {
	var errs []error
	for i := len(g) - 1; i >= 0; i-- {
		errs = append(errs, g[i].Release(ctx))
	}
	return errors.Join(errs...)
}

// makeRangeLockers gives every client node a range locker of the run's kind.
func makeRangeLockers(o options, eps []rdma.Endpoint, p params) []shiftlock.Locker {
	ls := make([]shiftlock.Locker, len(eps))
	domain := rangeDomain(o)
	for i, ep := range eps {
		switch o.lock {
		case "citron":
			cfg := rangelock.Config{Wait: o.rangeWait, NoToken: true, FastPath: o.rangeFast}
			if cfg.Wait == 0 && o.fabric == "model" {
				cfg.Wait = 15 * time.Microsecond // CITRON §4.7: on the fake clock the paper's RDMA timing holds
			}
			ls[i] = citronLocker{lk: rangelock.New(ep, rangeTree(o), cfg), entries: domain}
		case "ss":
			ls[i] = ssLocker{d: baseline.NewDSLR(ep, baseline.DSLRConfig{Omega: p.dslrOmega, BackoffBase: p.dslrR, Lease: p.dslrLease}),
				seg: o.ssSegment, entries: domain}
		}
	}
	return ls
}

// rangeStats sums the range lockers' retries.
func rangeStats(ls []shiftlock.Locker) string {
	var aborts, backoffs, fast, promoted uint64
	for _, l := range ls {
		if c, ok := l.(citronLocker); ok {
			s := c.lk.Stats()
			aborts += s.Aborts
			backoffs += s.Backoffs
			fast += s.FastPaths
			promoted += s.Promotions
		}
	}
	if _, ok := ls[0].(citronLocker); ok {
		return fmt.Sprintf("aborts=%d backoffs=%d fast_paths=%d promotions=%d", aborts, backoffs, fast, promoted)
	}
	return ""
}
