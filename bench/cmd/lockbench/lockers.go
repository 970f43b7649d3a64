package main

import (
	"context"
	"fmt"
	"time"

	"github.com/shiftlock/shiftlock-proxy/bench/shiftlock/baseline"
	"github.com/shiftlock/shiftlock-proxy/bench/shiftlock/baseline/fisslock"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// params are the resolved lock parameters of a run.
type params struct {
	rtt                          time.Duration
	casBackoff, dslrOmega, dslrR time.Duration
	casUpdateBatch               int
	shiftlockCfg                 shiftlock.Config
	dslrLease                    time.Duration
	// trace collects the latency breakdown (Table 2) of every lock kind
	// that reports one.
	trace func(shiftlock.Phase, time.Duration)
}

// resolveParams fills in the baselines' wait parameters. The published
// values (SMART's initial backoff 1862 ns as the ShiftLock artifact sets it,
// DSLR's ω = 5 µs and backoff base R = 10 µs) were chosen for an RDMA round
// trip of about 2 µs; a fabric with a different round trip gets them scaled
// by rtt/2µs, so each keeps the same ratio of waiting to polling.
func resolveParams(o options, rtt time.Duration) params {
	scale := func(paper time.Duration) time.Duration {
		return time.Duration(float64(paper) * float64(rtt) / float64(paperRTT))
	}
	p := params{rtt: rtt, casBackoff: o.casBackoff, casUpdateBatch: o.casUpdateBatch, dslrOmega: o.dslrOmega, dslrR: o.dslrBase}
	if p.casBackoff <= 0 {
		p.casBackoff = scale(baseline.DefaultInitialBackoff)
	}
	if p.dslrOmega <= 0 {
		p.dslrOmega = scale(5 * time.Microsecond)
		if o.artifactOmega {
			// The artifact passes its one backoff parameter to DSLR's
			// dynamic wait as ω: 1862 ns in every run the ShiftLock paper
			// reports.
			p.dslrOmega = scale(baseline.DefaultInitialBackoff)
		}
	}
	if p.dslrR <= 0 {
		p.dslrR = scale(10 * time.Microsecond)
	}
	p.shiftlockCfg = shiftlock.Config{Threshold: o.writerRun}
	switch o.readerPoll {
	case "rtt":
		// The artifact's waiters READ, then busy-wait its backoff (1862ns
		// at a 2.05µs round trip) and READ again: about one poll per RTT.
		p.shiftlockCfg.PollMin = scale(baseline.DefaultInitialBackoff)
		p.shiftlockCfg.PollMax = p.shiftlockCfg.PollMin
	case "", "backoff":
	default:
		d, _ := time.ParseDuration(o.readerPoll)
		p.shiftlockCfg.PollMin, p.shiftlockCfg.PollMax = d, d
	}
	// DSLR's lease only matters when something fails; without failures a
	// long one keeps scheduling stalls on this shared machine from being
	// taken for crashes.
	p.dslrLease = 10 * o.lease
	if o.recovery {
		// ShiftLock §3.6 with T_lease: check RelCnt every T/2, recover
		// after 3T, wait T for a successor.
		p.shiftlockCfg.CheckInterval = o.lease / 2
		p.shiftlockCfg.StaleAfter = 3 * o.lease
		p.shiftlockCfg.SuccessorTimeout = o.lease
		p.dslrLease = o.lease
	}
	return p
}

func (p params) String() string {
	poll := "20µs-1ms"
	if p.shiftlockCfg.PollMin > 0 {
		poll = p.shiftlockCfg.PollMin.String()
	}
	return fmt.Sprintf("rtt=%v cas-backoff=%v dslr-omega=%v dslr-R=%v dslr-lease=%v reader-poll=%s", p.rtt, p.casBackoff, p.dslrOmega, p.dslrR, p.dslrLease, poll)
}

// makeLockers gives every client node a locker of the run's kind.
func makeLockers(kind string, eps []rdma.Endpoint, p params) []shiftlock.Locker {
	ls := make([]shiftlock.Locker, len(eps))
	for i, ep := range eps {
		switch kind {
		case "shiftlock":
			ls[i] = shiftlock.NewClient(ep, p.shiftlockCfg)
		case "shiftlock-nobump":
			cfg := p.shiftlockCfg
			cfg.NoHandoverBump = true
			ls[i] = shiftlock.NewClient(ep, cfg)
		case "shiftlock-pipelined":
			cfg := p.shiftlockCfg
			cfg.PipelineBump = true
			ls[i] = shiftlock.NewClient(ep, cfg)
		case "shiftlock-artifact":
			cfg := p.shiftlockCfg
			cfg.NoHandoverBump = true
			ls[i] = &artifactWriter{Client: shiftlock.NewClient(ep, cfg), wait: p.casBackoff}
		case "cas-nb":
			ls[i] = baseline.NewCAS(ep, baseline.CASConfig{Trace: p.trace})
		case "cas-b":
			ls[i] = baseline.NewCAS(ep, baseline.CASConfig{Backoff: true, InitialBackoff: p.casBackoff, UpdateBatch: p.casUpdateBatch, Trace: p.trace})
		case "dslr":
			ls[i] = baseline.NewDSLR(ep, baseline.DSLRConfig{Omega: p.dslrOmega, BackoffBase: p.dslrR, Lease: p.dslrLease, Trace: p.trace})
		case "mcs":
			ls[i] = baseline.NewMCS(ep)
		}
	}
	return ls
}

// lockStats summarises the lockers' own counters for the report.
func lockStats(ls []shiftlock.Locker) string {
	if _, ok := ls[0].(*artifactWriter); ok {
		inner := make([]shiftlock.Locker, len(ls))
		for i, l := range ls {
			inner[i] = l.(*artifactWriter).Client
		}
		ls = inner
	}
	var a [8]uint64
	switch ls[0].(type) {
	case *shiftlock.Client:
		for _, l := range ls {
			s := l.(*shiftlock.Client).Stats()
			a[0] += s.Handovers.Load()
			a[1] += s.ModeChanges.Load()
			a[2] += s.Resets.Load()
			a[3] += s.RecoveryRequests.Load()
			a[4] += s.Lost.Load()
			a[5] += s.LocalSends.Load()
			a[6] += s.ChecksSkipped.Load()
			a[7] += s.BumpWaits.Load()
		}
		return fmt.Sprintf("handovers=%d modechanges=%d resets=%d recovery_requests=%d lost=%d local_sends=%d checks_skipped=%d bump_waits=%d", a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7])
	case *baseline.CAS:
		for _, l := range ls {
			s := l.(*baseline.CAS).Stats()
			a[0] += s.Retries.Load()
			a[1] += s.Grants.Load()
		}
		return fmt.Sprintf("retries=%d grants=%d", a[0], a[1])
	case *baseline.DSLR:
		for _, l := range ls {
			s := l.(*baseline.DSLR).Stats()
			a[0] += s.Failures.Load()
			a[1] += s.FullBackoffs.Load()
			a[2] += s.OverflowResets.Load()
			a[3] += s.LeaseResets.Load()
			a[4] += s.ExpiredLeases.Load()
		}
		return fmt.Sprintf("failures=%d full_backoffs=%d overflow_resets=%d lease_resets=%d expired_leases=%d", a[0], a[1], a[2], a[3], a[4])
	case *baseline.MCS:
		for _, l := range ls {
			s := l.(*baseline.MCS).Stats()
			a[0] += s.Handovers.Load()
			a[1] += s.LocalSends.Load()
		}
		return fmt.Sprintf("handovers=%d local_sends=%d", a[0], a[1])
	}
	return ""
}

// newFiss starts the emulated FissLock for a run: one machine per client
// node, linked to the switch by half the fabric's round trip each way (on
// the model; memfab has no latency, and neither does its switch). parlock
// is the same cluster with no lock on the switch.
func newFiss(o options) (*fisslock.Cluster, []shiftlock.Locker) {
	cfg := fisslock.Config{Nodes: o.nodes, Entries: o.entries, Capacity: o.switchCapacity,
		SwitchPacket: o.switchPacket, ServerPacket: o.serverPacket}
	if o.lock == "parlock" {
		cfg.Capacity = 0
	}
	if o.fabric == "model" {
		cfg.Hop = o.modelVerb / 2
	}
	c := fisslock.New(cfg)
	ls := make([]shiftlock.Locker, o.nodes)
	for i := range ls {
		ls[i] = c.Node(i)
	}
	return c, ls
}

// fissStats summarises the emulated cluster's counters per cycle.
func fissStats(c *fisslock.Cluster, cycles uint64) string {
	s := c.Stats()
	sw, srv := c.Packets()
	per := func(n uint64) float64 { return float64(n) / float64(max(cycles, 1)) }
	return fmt.Sprintf("switch_grants=%d agent_grants=%d fallback=%d fallback_local=%d transfers=%d bounces=%d refused=%d switch_pkts_per_cycle=%.2f server_pkts_per_cycle=%.2f",
		s.SwitchGrants.Load(), s.AgentGrants.Load(), s.Fallback.Load(), s.FallbackLocal.Load(), s.Transfers.Load(), s.Bounces.Load(), s.Refused.Load(), per(sw), per(srv))
}

// artifactWriter is ShiftLock as the authors' artifact runs it: no RelCnt
// bump on handover, and a writer first tries to take a free entry with a
// conditional CAS, twice, waiting the artifact's backoff parameter between
// the tries (its acquire_ex_trivial, "to improve some performance when
// contention is low but not very low"), before it enqueues.
type artifactWriter struct {
	*shiftlock.Client
	wait time.Duration
}

// artifactTries is the artifact's RETRY_LIMIT for those tries.
const artifactTries = 2

func (a *artifactWriter) Acquire(ctx context.Context, entry uint64, m shiftlock.Mode) (shiftlock.Grant, error) {
	if m == shiftlock.Exclusive {
		for i := range artifactTries {
			g, ok, err := a.TryExclusive(ctx, entry)
			if err != nil {
				return nil, err
			}
			if ok {
				return g, nil
			}
			if i+1 < artifactTries {
				time.Sleep(a.wait << i)
			}
		}
	}
	return a.Client.Acquire(ctx, entry, m)
}
