package baseline

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// CASConfig configures a CAS lock.
type CASConfig struct {
	// Backoff selects CAS-B: SMART's truncated exponential backoff between
	// attempts. Without it (CAS-NB) a failed CAS is retried at once.
	Backoff bool
	// InitialBackoff is SMART's initial backoff (default
	// DefaultInitialBackoff).
	InitialBackoff time.Duration
	// UpdateBatch, if positive, has SMART's limit reconsidered only once
	// per that many acquisitions (and at most once a millisecond), as the
	// authors' artifact does: its client loop checks the time after every
	// batch of ArtifactUpdateBatch acquisitions. 0 checks at every one.
	UpdateBatch int
	// Trace, if set, is told the latency breakdown (IA, RT, release).
	Trace Trace

	// skipCompare is the deliberately broken variant for tests: acquire
	// swaps the word in without comparing, so two clients can hold at once.
	skipCompare bool
}

// CAS is the exclusive spin lock of ShiftLock §2.2: the first word of an
// entry is zero when free and holds the holder's id when taken. Acquire is
// one 8-byte CAS from 0 to the id, repeated until it succeeds; release is one
// CAS from the id back to 0. Releasing with a CAS rather than a WRITE follows
// the authors' artifact, and lets release notice a word it does not own.
type CAS struct {
	ep      rdma.Endpoint
	layout  rdma.Layout
	cfg     CASConfig
	backoff *smartBackoff // nil for CAS-NB
	seq     atomic.Uint64
	stats   CASStats
}

// CASStats count a CAS lock's attempts.
type CASStats struct {
	Grants, Retries atomic.Uint64
}

// NewCAS returns a CAS lock on ep's memory node.
func NewCAS(ep rdma.Endpoint, cfg CASConfig) *CAS {
	if cfg.InitialBackoff <= 0 {
		cfg.InitialBackoff = DefaultInitialBackoff
	}
	l := &CAS{ep: ep, layout: ep.Layout(), cfg: cfg}
	if cfg.Backoff {
		l.backoff = newSmartBackoff(cfg.InitialBackoff)
		l.backoff.batch = uint64(max(cfg.UpdateBatch, 0))
	}
	return l
}

var _ shiftlock.Locker = (*CAS)(nil)

// Entries is the number of lock entries.
func (l *CAS) Entries() uint64 { return l.layout.LockEntries }

// Stats are the lock's counters.
func (l *CAS) Stats() *CASStats { return &l.stats }

// BackoffLimit is CAS-B's current adaptive limit (0 for CAS-NB).
func (l *CAS) BackoffLimit() time.Duration {
	if l.backoff == nil {
		return 0
	}
	return l.backoff.Limit()
}

// holderID is non-zero and names this grant: node in bits 40..55, a
// sequence number below, and bit 63 so that it is never zero.
func (l *CAS) holderID() uint64 {
	return 1<<63 | uint64(l.ep.Node())<<40 | l.seq.Add(1)&(1<<40-1)
}

// Acquire takes entry exclusively whatever m is: the CAS lock has no shared
// mode. A CAS in flight is never abandoned to ctx, because it may land and
// take the lock; ctx is checked between attempts.
func (l *CAS) Acquire(ctx context.Context, entry uint64, m shiftlock.Mode) (shiftlock.Grant, error) {
	if entry >= l.layout.LockEntries {
		return nil, fmt.Errorf("baseline: entry %d out of range (%d entries)", entry, l.layout.LockEntries)
	}
	addr := l.layout.EntryAddr(entry)
	id := l.holderID()
	vctx := context.WithoutCancel(ctx)
	tr := l.cfg.Trace
	iaPhase, rtPhase := phasesOf(m)
	var retrying time.Time
	for k := 0; ; k++ {
		var old uint64
		var err error
		var t0 time.Time
		if k == 0 {
			t0 = tr.start()
		}
		if l.cfg.skipCompare {
			// Report the store as a win whatever the word held.
			_, err = l.ep.MaskedCAS64(vctx, addr, 0, 0, id, ^uint64(0))
		} else {
			old, err = l.ep.CAS(vctx, addr, 0, id)
		}
		if err != nil {
			return nil, err
		}
		if k == 0 {
			tr.done(iaPhase, t0)
			retrying = tr.start()
		}
		if old == 0 {
			l.stats.Grants.Add(1)
			if l.backoff != nil {
				l.backoff.completed()
			}
			if k == 0 {
				tr.zero(rtPhase)
			} else {
				tr.done(rtPhase, retrying)
			}
			return &casGrant{l: l, addr: addr, id: id}, nil
		}
		l.stats.Retries.Add(1)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if l.backoff != nil {
			pause(l.backoff.wait(k))
		} else {
			pause(0)
		}
	}
}

type casGrant struct {
	l    *CAS
	addr rdma.Addr
	id   uint64
	done bool
}

func (g *casGrant) Token() uint64 { return 0 }

func (g *casGrant) Release(ctx context.Context) error {
	if g.done {
		return nil
	}
	g.done = true
	ctx = context.WithoutCancel(ctx)
	if g.l.cfg.skipCompare {
		var zero [8]byte
		return g.l.ep.Write(ctx, g.addr, zero[:])
	}
	t0 := g.l.cfg.Trace.start()
	old, err := g.l.ep.CAS(ctx, g.addr, g.id, 0)
	if err != nil {
		return err
	}
	g.l.cfg.Trace.done(shiftlock.PhaseReleaseIA, t0)
	if old != g.id {
		return fmt.Errorf("baseline: CAS lock at %v held %#x at release, not this holder's %#x", g.addr, old, g.id)
	}
	return nil
}
