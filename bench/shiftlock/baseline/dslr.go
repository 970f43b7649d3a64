package baseline

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// DSLRConfig configures a DSLR lock. Zero values take DSLR's defaults.
type DSLRConfig struct {
	// Omega is ω, the wait per ticket ahead of ours between READs (DSLR §4.6:
	// 5 µs on the authors' cluster, "tuned based on the average RDMA
	// latency").
	Omega time.Duration
	// Lease is the lease time (DSLR §4.1: 10 ms). A waiter that sees the
	// counters stand still for twice the lease resets the word; a holder
	// past its lease does not release.
	Lease time.Duration
	// BackoffBase and BackoffLimit are R and L of DSLR's truncated binary
	// exponential backoff (Appendix A.3: 10 µs and 10 ms).
	BackoffBase, BackoffLimit time.Duration
	// CountMax is COUNT_MAX (default and maximum 32768). Tests lower it to
	// exercise the overflow reset.
	CountMax uint64
	// Trace, if set, is told the latency breakdown (IA, RT, release).
	Trace Trace
}

func (c *DSLRConfig) defaults() {
	if c.Omega <= 0 {
		c.Omega = 5 * time.Microsecond
	}
	if c.Lease <= 0 {
		c.Lease = 10 * time.Millisecond
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = 10 * time.Microsecond
	}
	if c.BackoffLimit <= 0 {
		c.BackoffLimit = 10 * time.Millisecond
	}
	if c.CountMax < 2 || c.CountMax > DefaultCountMax {
		c.CountMax = DefaultCountMax
	}
}

// DSLR is the reader-writer lock of DSLR (Yoon et al., SIGMOD '18, §4): a
// bakery on one 64-bit word. A client takes a ticket with one FAA on maxX or
// maxS and is served once the counters nX (and, for a writer, nS) reach the
// ticket; a release is one FAA on nX or nS. Waiters poll with READs, waiting
// ω per ticket ahead of them between READs.
//
// Readings of the pseudocode (Algorithms 1-3) where it is ambiguous or would
// break the lock; docs/benchmarks/micro.md lists the same:
//
//   - A waiter waits before its first READ (the FAA's result is as fresh as
//     a READ), as the authors' artifact does, rather than READing at once.
//   - A reader's "skipped by a reset" test is prev(maxX) < nX only.
//     Algorithm 2 also fails a reader when prev(maxS) < nS, but readers
//     behind it in the same phase may release before it READs, so nS passes
//     its ticket in the normal course; failing then would leak its ticket
//     and stall the lock until a lease reset.
//   - A waiter also fails (and retries) when maxX or maxS has dropped below
//     its own ticket: only a reset to zero does that, after which nX would
//     climb back to its stale ticket and admit it at the wrong time.
//   - Algorithm 3 repeats the overflow-reset CAS "until it succeeds", which
//     never exits if a holder ahead died. The loop here gives up after
//     twice the lease (the lease reset then clears the word), or as soon
//     as the word shows that someone else reset it.
//   - Algorithm 3 lets the holder responsible for the overflow reset release
//     even past its lease. Here no holder past its lease touches the word:
//     a waiter may already have reset it after twice the lease, and a late
//     FAA would corrupt the fresh counters. The word is then cleared by the
//     lease reset of Algorithm 1, lines 7-8.
//   - That lease reset (a newcomer that finds the word full and the
//     counters still for twice the lease) has no ticket to reset "from";
//     it resets the word to zero, which is what the responsible holder
//     would have done.
//
// The lease resets are one-sided and so not safe against every schedule
// (ShiftLock §3.6, Fig. 2b): they assume that a holder never keeps the lock
// past its lease. They fire only on failures or stalls longer than twice
// the lease; Stats().LeaseResets counts them.
type DSLR struct {
	ep     rdma.Endpoint
	layout rdma.Layout
	cfg    DSLRConfig
	stats  DSLRStats
}

// DSLRStats count a DSLR lock's events.
type DSLRStats struct {
	Grants         atomic.Uint64
	Failures       atomic.Uint64 // acquisitions that had to start over
	FullBackoffs   atomic.Uint64 // tickets returned because the word was full
	OverflowResets atomic.Uint64 // COUNT_MAX resets to zero
	LeaseResets    atomic.Uint64 // resets after the counters stood still for 2x lease
	ExpiredLeases  atomic.Uint64 // releases skipped because the lease had passed
}

// NewDSLR returns a DSLR lock on ep's memory node.
func NewDSLR(ep rdma.Endpoint, cfg DSLRConfig) *DSLR {
	cfg.defaults()
	return &DSLR{ep: ep, layout: ep.Layout(), cfg: cfg}
}

var _ shiftlock.Locker = (*DSLR)(nil)

// Entries is the number of lock entries.
func (d *DSLR) Entries() uint64 { return d.layout.LockEntries }

// Stats are the lock's counters.
func (d *DSLR) Stats() *DSLRStats { return &d.stats }

// Config is the effective configuration.
func (d *DSLR) Config() DSLRConfig { return d.cfg }

// errRetry: this attempt failed (the word was full, or reset under us);
// take a new ticket.
var errRetry = errors.New("dslr: retry")

// attempt carries what survives from one failed attempt to the next: the
// consecutive failures for the backoff and, for a newcomer blocked by a full
// word, when the counters last moved.
type attempt struct {
	failures int
	lastN    [2]uint64
	since    time.Time
}

// Acquire takes entry in mode m, retrying after failures as DSLR's caller
// would. ctx is checked only between attempts: a ticket once taken must be
// served and released, or the lock stalls for twice the lease, so a waiter
// keeps its place even past ctx's deadline.
func (d *DSLR) Acquire(ctx context.Context, entry uint64, m shiftlock.Mode) (shiftlock.Grant, error) {
	if entry >= d.layout.LockEntries {
		return nil, fmt.Errorf("baseline: entry %d out of range (%d entries)", entry, d.layout.LockEntries)
	}
	var at attempt
	for {
		g, err := d.attempt(ctx, entry, m, &at)
		if errors.Is(err, errRetry) {
			d.stats.Failures.Add(1)
			at.failures++
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		d.stats.Grants.Add(1)
		return g, nil
	}
}

func (d *DSLR) attempt(ctx context.Context, entry uint64, m shiftlock.Mode, at *attempt) (*dslrGrant, error) {
	vctx := context.WithoutCancel(ctx)
	addr := d.layout.EntryAddr(entry)
	field := fMaxX
	if m == shiftlock.Shared {
		field = fMaxS
	}
	tr := d.cfg.Trace
	iaPhase, rtPhase := phasesOf(m)
	t0 := tr.start()
	raw, err := d.ep.FAA(vctx, addr, inc(field))
	if err != nil {
		return nil, err
	}
	tr.done(iaPhase, t0)
	p := decodeDSLR(raw)
	cm := d.cfg.CountMax
	if p.maxX >= cm || p.maxS >= cm {
		// Algorithm 1, lines 4-9: the word is full until the holder of the
		// last ticket resets it; give the ticket back and back off.
		d.stats.FullBackoffs.Add(1)
		if _, err := d.ep.FAA(vctx, addr, dec(field)); err != nil {
			return nil, err
		}
		d.fullWord(vctx, addr, p, at)
		return nil, errRetry
	}
	at.since = time.Time{}
	g := &dslrGrant{d: d, entry: entry, addr: addr, mode: m}
	if m == shiftlock.Shared && p.maxS == cm-1 {
		g.resetFrom, g.responsible = dslrWord{nX: p.maxX, nS: cm, maxX: p.maxX, maxS: cm}.encode(), true
	}
	if m == shiftlock.Exclusive && p.maxX == cm-1 {
		g.resetFrom, g.responsible = dslrWord{nX: cm, nS: p.maxS, maxX: cm, maxS: p.maxS}.encode(), true
	}
	if granted(p, p, m) {
		tr.zero(rtPhase)
		g.at = time.Now()
		return g, nil
	}
	t0 = tr.start()
	err = d.handleConflict(ctx, addr, p, m)
	tr.done(rtPhase, t0)
	if err != nil {
		if errors.Is(err, errRetry) {
			pause(binaryExpBackoff(at.failures+1, d.cfg.BackoffBase, d.cfg.BackoffLimit))
		}
		return nil, err
	}
	g.at = time.Now()
	return g, nil
}

// granted reports whether the ticket taken at prev is being served in v.
func granted(prev, v dslrWord, m shiftlock.Mode) bool {
	if m == shiftlock.Shared {
		return v.nX == prev.maxX
	}
	return v.nX == prev.maxX && v.nS == prev.maxS
}

// skipped reports whether a reset has passed over the ticket taken at prev,
// so that it will never be served: the counters went past it, or the word
// was zeroed (maxX or maxS fell below the ticket).
func skipped(prev, v dslrWord, m shiftlock.Mode) bool {
	if prev.maxX < v.nX {
		return true
	}
	if m == shiftlock.Exclusive {
		return prev.maxS < v.nS || v.maxX <= prev.maxX || v.maxS < prev.maxS
	}
	return v.maxS <= prev.maxS || v.maxX < prev.maxX
}

// handleConflict is Algorithm 2: poll with READs, waiting ω per ticket
// ahead, until served; reset the word if its counters stand still for twice
// the lease.
func (d *DSLR) handleConflict(ctx context.Context, addr rdma.Addr, p dslrWord, m shiftlock.Mode) error {
	vctx := context.WithoutCancel(ctx)
	last := p
	lastChange := time.Now()
	v := p
	var buf [8]byte
	for {
		ahead := (p.maxX - v.nX) + (p.maxS - v.nS)
		if m == shiftlock.Shared && v.nS > p.maxS {
			ahead = p.maxX - v.nX // readers after us already counted; only writers matter
		}
		pause(time.Duration(ahead) * d.cfg.Omega)
		if err := d.ep.Read(vctx, addr, buf[:]); err != nil {
			return err
		}
		v = decodeDSLR(le64(buf[:]))
		if skipped(p, v, m) {
			return errRetry
		}
		if granted(p, v, m) {
			return nil
		}
		if v.nX != last.nX || v.nS != last.nS {
			last, lastChange = v, time.Now()
			continue
		}
		if time.Since(lastChange) > 2*d.cfg.Lease {
			d.leaseReset(vctx, addr, p, v, m)
			return errRetry
		}
	}
}

func le64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

type dslrGrant struct {
	d           *DSLR
	entry       uint64
	addr        rdma.Addr
	mode        shiftlock.Mode
	at          time.Time
	resetFrom   uint64
	responsible bool
	done        bool
}

func (g *dslrGrant) Token() uint64 { return 0 }

// Release is Algorithm 3: one FAA on nX or nS, then, for the holder of the
// last ticket before COUNT_MAX, the reset of the word to zero.
func (g *dslrGrant) Release(ctx context.Context) error {
	if g.done {
		return nil
	}
	g.done = true
	d := g.d
	ctx = context.WithoutCancel(ctx)
	if time.Since(g.at) >= d.cfg.Lease {
		d.stats.ExpiredLeases.Add(1)
		return nil
	}
	field := fNX
	if g.mode == shiftlock.Shared {
		field = fNS
	}
	t0 := d.cfg.Trace.start()
	if _, err := d.ep.FAA(ctx, g.addr, inc(field)); err != nil {
		return err
	}
	d.cfg.Trace.done(shiftlock.PhaseReleaseIA, t0)
	if g.responsible {
		return d.overflowReset(ctx, g.addr, g.resetFrom)
	}
	return nil
}
