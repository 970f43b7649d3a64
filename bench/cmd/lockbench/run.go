package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/shiftlock/shiftlock-proxy/bench/shiftlock/baseline/fisslock"
	"github.com/shiftlock/shiftlock-proxy/internal/keydist"
	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
	"github.com/shiftlock/shiftlock-proxy/shiftlock/locktest"
)

// Phases of a run, in order.
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// timelineStep is the resolution of -timeline.
const timelineStep = 100 * time.Millisecond

// worker is one client: a goroutine doing one acquire-release cycle at a
// time, with its own latency histograms so that recording never contends.
type worker struct {
	id           int
	l            shiftlock.Locker
	rnd          *rand.Rand
	read, write  *hdrhistogram.Histogram
	cycles       atomic.Uint64 // measured cycles
	all          atomic.Uint64 // every cycle, for progress
	abandoned    atomic.Uint64
	errs         atomic.Uint64
	firstErr     error
	blockedSince atomic.Int64
}

// Latencies are recorded in ns with two significant digits (1% error),
// from 100 ns to 100 s: 240 clients x 2 histograms stay small.
func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(100, 100_000_000_000, 2) }

// bench is a run in progress.
type bench struct {
	o        options
	dist     keydist.Dist
	phase    atomic.Int32
	start    time.Time
	timeline []atomic.Uint64
	hot      hotKey
	// hotAsked is key 0 from request to release: the share of the window
	// during which someone asked for it or held it. Near 1, requests queue
	// behind each other at the key and its serial service binds; the held
	// share alone misses that for locks whose release returns before the
	// handover it starts has reached the next holder (MCS, FissLock).
	hotAsked hotKey
	// phases sums ShiftLock's phase times over the window (Table 2).
	phases [shiftlock.NumPhases]atomic.Int64
	// phaseN counts each phase's occurrences (the authors' artifact
	// averages a phase over them).
	phaseN [shiftlock.NumPhases]atomic.Int64
}

// hotKey watches key 0, the hottest of a Zipf or hotspot distribution:
// how often it is asked for, and how much of the window it is held. When
// its busy share nears 1, its serial service rate is what binds (the
// paper's regime); when it is low, something else does.
type hotKey struct {
	requests atomic.Uint64
	mu       sync.Mutex
	holders  int
	since    time.Time
	busy     time.Duration
}

func (h *hotKey) held(delta int, measuring bool) {
	h.mu.Lock()
	now := time.Now()
	if h.holders > 0 && measuring {
		h.busy += now.Sub(h.since)
	}
	h.since = now
	h.holders += delta
	h.mu.Unlock()
}

func (b *bench) loop(w *worker) {
	ctx := context.Background()
	if n := len(b.o.rangeSizes); n > 0 {
		ctx = withRangeSize(ctx, b.o.rangeSizes[w.id%n])
	}
	for {
		ph := b.phase.Load()
		if ph == phaseStop {
			return
		}
		entry := b.dist.Next(w.rnd)
		mode := shiftlock.Exclusive
		if w.rnd.Float64() < b.o.readers {
			mode = shiftlock.Shared
		}
		t0 := time.Now()
		w.blockedSince.Store(t0.UnixNano())
		if entry == 0 {
			if ph == phaseMeasure {
				b.hot.requests.Add(1)
			}
			b.hotAsked.held(1, ph == phaseMeasure)
		}
		g, err := w.l.Acquire(ctx, entry, mode)
		lat := time.Since(t0)
		if err != nil {
			if entry == 0 {
				b.hotAsked.held(-1, b.phase.Load() == phaseMeasure)
			}
			w.fail(err)
			return
		}
		measuring := b.phase.Load() == phaseMeasure
		if entry == 0 {
			b.hot.held(1, measuring)
		}
		if measuring {
			h := w.write
			if mode == shiftlock.Shared {
				h = w.read
			}
			_ = h.RecordValue(max(lat.Nanoseconds(), 100))
		}
		if b.o.hold > 0 {
			if b.o.fabric == "model" {
				time.Sleep(b.o.hold) // on the fake clock a spin would take no time
			} else {
				locktest.Spin(b.o.hold)
			}
		}
		released := true
		if b.o.failRate > 0 && w.rnd.Float64() < b.o.failRate {
			// A crashed client: the lock is never released.
			w.abandoned.Add(1)
		} else if err := g.Release(ctx); err != nil {
			w.fail(err)
			released = false
		}
		if entry == 0 {
			b.hot.held(-1, b.phase.Load() == phaseMeasure)
			b.hotAsked.held(-1, b.phase.Load() == phaseMeasure)
		}
		if !released {
			continue
		}
		w.blockedSince.Store(0)
		if b.o.think > 0 {
			if b.o.fabric == "model" {
				time.Sleep(b.o.think)
			} else {
				locktest.Spin(b.o.think)
			}
		}
		w.all.Add(1)
		if measuring && b.phase.Load() == phaseMeasure {
			w.cycles.Add(1)
		}
		if b.timeline != nil {
			if i := int(time.Since(b.start) / timelineStep); i < len(b.timeline) {
				b.timeline[i].Add(1)
			}
		}
	}
}

// fail counts an error; the first one is kept for the report. A release
// can fail after a recovery took the lock away (ShiftLock's ErrLost), which
// the failure runs expect; an acquire failure ends the client.
func (w *worker) fail(err error) {
	if w.errs.Add(1) == 1 {
		w.firstErr = err
	}
}

// edge reads the endpoints' counters together with the number of cycles
// completed so far. A cycle that completes while the counters are being
// read (or while this goroutine is descheduled, which on a loaded host can
// span many cycles) would put its verbs on one side and itself on the
// other, so the read is retried until the cycle count did not move across
// it. Under heavy load with many clients the count may never hold still;
// the last try is then used, as good as a single read.
func edge(eps []rdma.Endpoint, ws []*worker) (rdma.Snapshot, uint64) {
	completed := func() (n uint64) {
		for _, w := range ws {
			n += w.all.Load()
		}
		return n
	}
	var s rdma.Snapshot
	var n uint64
	for range 100 {
		n = completed()
		s = snapshot(eps)
		if completed() == n {
			break
		}
	}
	return s, n
}

func snapshot(eps []rdma.Endpoint) rdma.Snapshot {
	var s rdma.Snapshot
	for _, ep := range eps {
		s = s.Add(ep.Counters().Snapshot())
	}
	return s
}

// runBench performs one run.
func runBench(o options, stderr io.Writer) (*result, error) {
	dist, err := keydist.Parse(o.keys, o.keyDomain())
	if err != nil {
		return nil, err
	}
	cl, err := setupFabric(o)
	if err != nil {
		return nil, err
	}
	defer cl.close()
	rtt, err := measureRTT(cl.eps[0], o.rttProbes)
	if err != nil {
		return nil, fmt.Errorf("measuring the round trip: %w", err)
	}
	p := resolveParams(o, rtt)
	eps := cl.eps
	if o.iopsCap > 0 && o.fabric != "model" { // the model's budget is latfab's
		lim := newLimiter(o.iopsCap, o.capBurst)
		defer lim.stop()
		eps = make([]rdma.Endpoint, len(cl.eps))
		for i, ep := range cl.eps {
			eps[i] = &cappedEndpoint{Endpoint: ep, lim: lim}
		}
	}
	b := &bench{o: o, dist: dist}
	p.trace = func(ph shiftlock.Phase, d time.Duration) {
		if b.phase.Load() == phaseMeasure {
			b.phases[ph].Add(int64(d))
			b.phaseN[ph].Add(1)
		}
	}
	p.shiftlockCfg.Trace = p.trace
	var lockers []shiftlock.Locker
	var fc *fisslock.Cluster
	switch {
	case isRangeLock(o.lock):
		lockers = makeRangeLockers(o, eps, p)
	case isFiss(o.lock):
		fc, lockers = newFiss(o)
		defer fc.Close()
	default:
		lockers = makeLockers(o.lock, eps, p)
	}
	total := o.warmup + o.duration
	if o.timeline != "" {
		b.timeline = make([]atomic.Uint64, int(total/timelineStep)+1)
	}
	ws := make([]*worker, o.clients)
	for i := range ws {
		ws[i] = &worker{id: i, l: lockers[i%len(lockers)], rnd: rand.New(rand.NewPCG(o.seed, uint64(i))),
			read: newHist(), write: newHist()}
	}
	fmt.Fprintf(stderr, "lockbench: %s on %s, %d clients on %d nodes, %d entries, %s keys, %s, %v+%v; %v\n",
		o.lock, o.fabric, o.clients, o.nodes, o.entries, o.keys, o.workloadName(), o.warmup, o.duration, p)

	var wg sync.WaitGroup
	b.start = time.Now()
	for _, w := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); b.loop(w) }()
	}
	stopProgress := startProgress(o, b, ws, cl, stderr)

	time.Sleep(o.warmup)
	// Goodput and latency count the cycles that complete inside the
	// window. Verbs per cycle divide the verbs between two counter
	// snapshots by the cycles completed between the same two snapshots
	// (see edge), so only the cycles in flight at either edge, at most one
	// per client, blur it.
	cpu0, mcpu0, busy0 := procutil.SelfCPU(), memnodeCPU(cl), procutil.MachineBusy()
	before, cycles0 := edge(cl.eps, ws)
	b.phase.Store(phaseMeasure)
	t0 := time.Now()
	time.Sleep(o.duration)
	b.phase.Store(phaseStop)
	after, cycles1 := edge(cl.eps, ws)
	elapsed := time.Since(t0)
	cpu1, mcpu1, busy1 := procutil.SelfCPU(), memnodeCPU(cl), procutil.MachineBusy()
	stopProgress()

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	stuck := 0
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		for _, w := range ws {
			if w.blockedSince.Load() != 0 {
				stuck++
			}
		}
		fmt.Fprintf(stderr, "lockbench: %d clients still blocked 30s after the run; reporting without them\n", stuck)
	}

	r := &result{
		Time: nowStamp(), Label: o.label, Run: o.runIndex, Lock: o.lockName(), Fabric: o.fabricKind(),
		Nodes: o.nodes, Clients: o.clients, Entries: o.entries, Keys: o.keys, Workload: o.workloadName(),
		Readers: o.readers, HoldUS: float64(o.hold) / 1e3, FailRate: o.failRate, Recovery: b2i(o.recovery), DurationS: elapsed.Seconds(),
		RTTus: float64(rtt) / 1e3, IOPSCap: o.iopsCap, MemnodeCPU: -1,
		Params: p.String() + modelParam(o) + thinkParam(o.think), Stats: lockStats(lockers) + rangeStats(lockers),
	}
	rh, wh := newHist(), newHist()
	var firstErr error
	for _, w := range ws {
		r.Cycles += w.cycles.Load()
		r.Abandoned += w.abandoned.Load()
		r.Errors += w.errs.Load()
		if firstErr == nil && w.firstErr != nil && stuck == 0 {
			firstErr = w.firstErr
		}
		rh.Merge(w.read)
		wh.Merge(w.write)
	}
	r.Goodput = float64(r.Cycles) / elapsed.Seconds()
	if fc != nil {
		var all uint64
		for _, w := range ws {
			all += w.all.Load()
		}
		r.Stats = fissStats(fc, all)
	}
	r.HotRate = float64(b.hot.requests.Load()) / elapsed.Seconds()
	r.HotBusy = b.hot.busy.Seconds() / elapsed.Seconds()
	r.HotAsked = b.hotAsked.busy.Seconds() / elapsed.Seconds()
	r.RP50, r.RP99, r.RP999 = percentiles(rh)
	r.Phases = phaseMeans(&b.phases, &b.phaseN, wh.TotalCount(), rh.TotalCount())
	r.WP50, r.WP99, r.WP999 = percentiles(wh)
	d := after.Sub(before)
	if cycles1 > cycles0 {
		n := float64(cycles1 - cycles0)
		r.Atomics = float64(d.OutAtomics()) / n
		r.Reads = float64(d.Out[rdma.VerbRead]) / n
		r.Writes = float64(d.Out[rdma.VerbWrite]) / n
		r.Sends = float64(d.Out[rdma.VerbSend]) / n
		r.RoundTrips = float64(d.Out[rdma.VerbBatch]) / n
	}
	r.MemnodeIOPS = float64(d.OutAtomics()+d.Out[rdma.VerbRead]+d.Out[rdma.VerbWrite]) / elapsed.Seconds()
	r.ClientCPU = (cpu1 - cpu0).Seconds() / elapsed.Seconds()
	if mcpu0 >= 0 && mcpu1 >= 0 {
		r.MemnodeCPU = (mcpu1 - mcpu0).Seconds() / elapsed.Seconds()
	}
	if busy0 >= 0 && busy1 >= 0 {
		r.OtherCPU = max(0, (busy1-busy0).Seconds()/elapsed.Seconds()-r.ClientCPU-max(r.MemnodeCPU, 0))
	}
	if o.fabric == "model" {
		// Real CPU over fake time says nothing: the model's CPU is free.
		r.ClientCPU, r.OtherCPU = -1, -1
	}
	if o.timeline != "" {
		if err := writeTimeline(o.timeline, r, b.timeline); err != nil {
			return r, err
		}
	}
	if r.Cycles == 0 {
		if firstErr != nil {
			return r, fmt.Errorf("no cycles completed: %w", firstErr)
		}
		return r, errors.New("no cycles completed")
	}
	if firstErr != nil {
		fmt.Fprintf(stderr, "lockbench: %d errors, first: %v\n", r.Errors, firstErr)
	}
	return r, nil
}

// phaseMeans renders a lock's phase times in µs two ways: as means per
// acquisition of the phase's kind (writer phases over writer acquisitions,
// reader phases over reader ones, release phases over all), and, as
// "<phase>.occ", as means over the phase's own occurrences, which is how
// the authors' artifact averages the items of the paper's Tables 3 and 4
// (src/utils/timing.rs there: one sample per timed operation, and a zero
// for a writer's wait for readers when a handover spared it). Empty for
// locks that report no phases.
func phaseMeans(sums, counts *[shiftlock.NumPhases]atomic.Int64, writes, reads int64) string {
	var parts []string
	for ph := range shiftlock.NumPhases {
		n := writes + reads
		switch ph {
		case shiftlock.PhaseWriterIA, shiftlock.PhaseWriterNP, shiftlock.PhaseWriterWP, shiftlock.PhaseWriterWR:
			n = writes
		case shiftlock.PhaseWriterRT:
			n = writes
		case shiftlock.PhaseReaderIA, shiftlock.PhaseReaderWW, shiftlock.PhaseReaderRT:
			n = reads
		}
		if n == 0 || counts[ph].Load() == 0 { // a phase this lock never reports
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%.3f", ph, float64(sums[ph].Load())/float64(n)/1e3))
	}
	if len(parts) == 0 || sums[shiftlock.PhaseReleaseIA].Load() == 0 && sums[shiftlock.PhaseWriterIA].Load() == 0 && sums[shiftlock.PhaseReaderIA].Load() == 0 {
		return ""
	}
	for ph := range shiftlock.NumPhases {
		if n := counts[ph].Load(); n > 0 {
			parts = append(parts, fmt.Sprintf("%s.occ=%.3f", ph, float64(sums[ph].Load())/float64(n)/1e3))
		}
	}
	return strings.Join(parts, " ")
}

// memnodeCPU is the memnode process's CPU time so far, or -1.
func memnodeCPU(cl *cluster) time.Duration {
	if cl.memnode == nil {
		return -1
	}
	d, err := cl.memnode.cpuTime()
	if err != nil {
		return -1
	}
	return d
}

// percentiles are p50, p99 and p99.9 in µs, or -1 without samples.
func percentiles(h *hdrhistogram.Histogram) (p50, p99, p999 float64) {
	if h.TotalCount() == 0 {
		return -1, -1, -1
	}
	us := func(q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1e3 }
	return us(50), us(99), us(99.9)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// modelParam records the model fabric's Send latency and per-address atomic
// time in the params column, so that runs of a sensitivity sweep can be
// told apart (the verb round trip is there already as rtt).
func modelParam(o options) string {
	if o.fabric != "model" {
		return ""
	}
	s := " send=" + o.modelSend.String()
	if o.modelAtomic > 0 {
		s += " atomic=" + o.modelAtomic.String()
		if o.modelAtomicBlocks {
			s += " atomic-blocks"
		}
		if o.modelAtomicUnits > 0 {
			s += fmt.Sprintf(" atomic-units=%d", o.modelAtomicUnits)
		}
	}
	return s
}

// thinkParam records a client's time between operations in the params
// column, so that such runs are not mistaken for the grid's.
func thinkParam(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return " think=" + d.String()
}
