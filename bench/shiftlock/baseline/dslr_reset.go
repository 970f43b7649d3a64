package baseline

import (
	"context"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// The three ways DSLR's word is reset (DSLR §4.7, §4.9). See the DSLR type's
// doc comment for how each deviates from the pseudocode, and why.

// fullWord handles a ticket that found the word full (Algorithm 1, lines
// 4-9): after the ticket is returned, it backs off, and if the counters have
// stood still for twice the lease, the holder that should have reset the
// word is presumed dead and the word is reset to zero.
func (d *DSLR) fullWord(ctx context.Context, addr rdma.Addr, p dslrWord, at *attempt) {
	now := time.Now()
	n := [2]uint64{p.nX, p.nS}
	switch {
	case at.since.IsZero() || n != at.lastN:
		at.lastN, at.since = n, now
	case now.Sub(at.since) > 2*d.cfg.Lease:
		at.since = time.Time{}
		var buf [8]byte
		if err := d.ep.Read(ctx, addr, buf[:]); err == nil {
			v := decodeDSLR(le64(buf[:]))
			cm := d.cfg.CountMax
			if (v.maxX >= cm || v.maxS >= cm) && [2]uint64{v.nX, v.nS} == n {
				if old, err := d.ep.CAS(ctx, addr, v.encode(), 0); err == nil && old == v.encode() {
					d.stats.LeaseResets.Add(1)
				}
			}
		}
	}
	pause(binaryExpBackoff(at.failures+1, d.cfg.BackoffBase, d.cfg.BackoffLimit))
}

// leaseReset is Algorithm 2, lines 11-19: a waiter whose counters stood
// still for twice the lease moves them past every ticket up to its own, so
// that the waiters behind it proceed, and then starts over itself.
func (d *DSLR) leaseReset(ctx context.Context, addr rdma.Addr, p, v dslrWord, m shiftlock.Mode) {
	r := v
	if m == shiftlock.Shared {
		r.nX, r.nS = p.maxX, p.maxS+1
	} else {
		r.nX, r.nS = p.maxX+1, p.maxS
	}
	old, err := d.ep.CAS(ctx, addr, v.encode(), r.encode())
	if err != nil || old != v.encode() {
		return
	}
	d.stats.LeaseResets.Add(1)
	cm := d.cfg.CountMax
	// A full word whose every ticket is now accounted for has nobody left
	// to reset it; one with tickets still behind ours is reset by the last
	// of them as usual.
	if (r.maxX >= cm || r.maxS >= cm) && r.nX == r.maxX && r.nS == r.maxS {
		_ = d.overflowReset(ctx, addr, r.encode())
	}
}

// overflowReset is Algorithm 3, lines 6-7: CAS the word from the state in
// which every ticket has been served back to zero. The CAS fails while
// holders ahead have not released yet, or while newcomers briefly hold a
// ticket they are about to give back, so it is retried with DSLR's random
// backoff; unlike the pseudocode it stops once the word shows a reset by
// someone else, or after twice the lease, past which the lease reset takes
// over.
func (d *DSLR) overflowReset(ctx context.Context, addr rdma.Addr, from uint64) error {
	deadline := time.Now().Add(2 * d.cfg.Lease)
	cm := d.cfg.CountMax
	for c := 1; ; c++ {
		old, err := d.ep.CAS(ctx, addr, from, 0)
		if err != nil {
			return err
		}
		if old == from {
			d.stats.OverflowResets.Add(1)
			return nil
		}
		if o := decodeDSLR(old); o.maxX < cm && o.maxS < cm {
			return nil
		}
		if time.Now().After(deadline) {
			return nil
		}
		pause(binaryExpBackoff(c, d.cfg.BackoffBase, d.cfg.BackoffLimit))
	}
}
