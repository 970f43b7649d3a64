package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/shiftlock/shiftlock-proxy/bench/shiftlock/baseline"
	"github.com/shiftlock/shiftlock-proxy/internal/keydist"
)

// Lock kinds lockbench can run.
// shiftlock-nobump is ShiftLock without Algorithm 3's RelCnt bump on each
// handover, as the authors' artifact (which produced the paper's numbers)
// runs it; see shiftlock.Config.NoHandoverBump.
// fisslock and parlock are the emulated in-network lock and its server
// fallback (bench/shiftlock/baseline/fisslock); they run on memfab or the model
// only, since their switch is in-process.
// citron and ss are range locks (ranges.go), run with -range-sizes.
var lockKinds = append(append([]string{}, verbLocks...), "fisslock", "parlock", "citron", "ss")

// verbLocks are the lock kinds on the fabric's one-sided verbs, one lock
// table entry per key.
var verbLocks = []string{"shiftlock", "shiftlock-nobump", "shiftlock-pipelined", "shiftlock-artifact", "cas-nb", "cas-b", "dslr", "mcs"}

// Named workloads of ShiftLock §4.2: the fraction of shared acquisitions.
var workloads = map[string]float64{"WI": 0.5, "RI": 0.95, "RO": 1.0}

// paperRTT is the RDMA round trip the published parameters were chosen for:
// ShiftLock Table 3 measures one uncontended atomic at 2.05 µs (5 clients).
const paperRTT = 2 * time.Microsecond

// options are one run's settings.
type options struct {
	lock   string
	fabric string // "memfab", "model", "tcp" (start a memnode process) or "tcp://host:port"
	// modelVerb and modelSend are the model fabric's latencies (latfab).
	modelVerb, modelSend time.Duration
	// modelAtomic is the model's per-address atomic time (latfab).
	modelAtomic time.Duration
	// modelAtomicBlocks is latfab's AtomicBlocks.
	modelAtomicBlocks bool
	// modelAtomicUnits is latfab's AtomicUnits.
	modelAtomicUnits int
	clients          int
	nodes            int
	entries          uint64
	keys             string
	workload         string  // WI, RI, RO, or "" when readers is given
	readers          float64 // fraction of shared acquisitions
	duration         time.Duration
	warmup           time.Duration
	hold             time.Duration
	think            time.Duration
	failRate         float64
	recovery         bool // the paper's lease timings and recovery policy, even at failRate 0
	lease            time.Duration
	runIndex         int
	label            string
	csv              string
	seed             uint64
	progress         bool
	timeline         string
	iopsCap          float64
	capBurst         time.Duration
	rttProbes        int

	maxOtherCPU float64
	attempts    int

	// Baseline parameters; zero means "scaled from the paper's values by
	// this fabric's round trip" (see resolveParams).
	casBackoff time.Duration
	// casUpdateBatch: CAS-B reconsiders SMART's limit once per this many
	// acquisitions (the artifact: 64).
	casUpdateBatch int
	// readerPoll is ShiftLock's READ polling: "backoff" (the client's
	// default, 20µs doubling to 1ms), "rtt" (a fixed interval of 1862ns
	// scaled by RTT/2µs, as the artifact polls), or a fixed duration.
	// Measured on tcpfab (docs/benchmarks/micro.md, notes), rtt gained
	// nothing where the client CPU binds, so backoff stays the default.
	readerPoll string
	// writerRun is ShiftLock's N, the most consecutive writers before
	// waiting readers get the lock (shiftlock.Config.Threshold; 0: 16).
	writerRun int
	dslrOmega time.Duration
	// artifactOmega takes DSLR's ω from the ShiftLock artifact (see
	// resolveParams).
	artifactOmega bool
	dslrBase      time.Duration

	// The emulated FissLock: lock slots on the switch, the switch's time
	// per packet, a server core's time per packet.
	// Range-lock runs (ranges.go).
	rangeSizesFlag string
	rangeSizes     []uint64
	rangeDepth     int
	rangeWait      time.Duration
	rangeFast      bool
	ssSegment      uint64

	switchCapacity uint64
	switchPacket   time.Duration
	serverPacket   time.Duration

	// The memnode process for -fabric tcp.
	memnodeBin   string
	memnodeCPUs  string
	memnodeProcs int
	memnodeFlags string
}

func parseRun(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("lockbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: lockbench [flags]          run one measurement\n"+
			"       lockbench plot -csv FILE -out DIR [-prefix micro-]\n"+
			"       lockbench summary -csv FILE -doc FILE [-img DIR] [-title ...]\n"+
			"       lockbench table -csv FILE -section NAME [-ref LOCK] [-intro FILE] ...\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.lock, "lock", "shiftlock", "lock kind: "+strings.Join(lockKinds, ", "))
	fs.StringVar(&o.fabric, "fabric", "memfab", `memfab, model (memfab with an RDMA testbed's timing on a fake clock; see TestModel), tcp (start a memnode process on loopback), or tcp://host:port of a running memnode`)
	fs.DurationVar(&o.modelVerb, "model-verb", 2*time.Microsecond, "-fabric model: round trip of a one-sided verb")
	fs.DurationVar(&o.modelSend, "model-send", 3*time.Microsecond, "-fabric model: one-way latency of a Send")
	fs.BoolVar(&o.modelAtomicBlocks, "model-atomic-blocks", false, "-fabric model: an atomic waiting for its address holds up the memory node's whole queue (head-of-line blocking)")
	fs.IntVar(&o.modelAtomicUnits, "model-atomic-units", 0, "-fabric model: atomics the memory node works on at once, those waiting for their address included (0: no bound)")
	fs.DurationVar(&o.modelAtomic, "model-atomic", 0, "-fabric model: how long an atomic occupies its address at the memory node (atomics on one address take turns; 0: no such limit)")
	fs.IntVar(&o.clients, "clients", 240, "client goroutines, each doing one acquire-release cycle at a time")
	fs.IntVar(&o.nodes, "nodes", 5, "client nodes (endpoints) the clients are spread over")
	fs.Uint64Var(&o.entries, "entries", 10_000_000, "lock-table entries (the paper uses 10 million)")
	fs.StringVar(&o.keys, "keys", "zipf:0.99", "key distribution: uniform, zipf:θ or hotspot:keys%:ops%")
	fs.StringVar(&o.workload, "workload", "WI", "named workload: WI (50% readers), RI (95%), RO (100%); ignored when -readers is set")
	readers := fs.String("readers", "", "fraction of shared acquisitions (overrides -workload)")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "measured time")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "time run before measuring")
	fs.DurationVar(&o.hold, "hold", 0, "time spent inside each critical section")
	fs.DurationVar(&o.think, "think", 0, "time each client spends between a release and its next acquire (a client's own work per operation; on the model, client CPU otherwise costs nothing)")
	fs.Float64Var(&o.failRate, "fail-rate", 0, "probability that a client does not release (a crashed client; ShiftLock §4.8)")
	fs.BoolVar(&o.recovery, "recovery", false, "run with the failure settings of -fail-rate (lease timings, the memnode's paper recovery policy) even without failures: the p = 0 point of Fig. 13")
	fs.DurationVar(&o.lease, "lease", 10*time.Millisecond, "T_lease for -fail-rate: ShiftLock checks every T/2 and recovers after 3T; DSLR resets after 2T")
	fs.IntVar(&o.runIndex, "run", 0, "run number, recorded in the CSV")
	fs.StringVar(&o.label, "label", "", "free-form label recorded in the CSV")
	fs.StringVar(&o.csv, "csv", "", "append the result to this CSV file")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed")
	fs.BoolVar(&o.progress, "progress", true, "print progress to stderr every second")
	fs.StringVar(&o.timeline, "timeline", "", "write goodput per 100ms to this CSV file")
	fs.Float64Var(&o.iopsCap, "iops-cap", 0, "cap on verbs per second reaching the memory node, all clients together (0: none)")
	fs.DurationVar(&o.capBurst, "cap-burst", time.Millisecond, "how much unused -iops-cap budget may be spent at once")
	fs.Float64Var(&o.maxOtherCPU, "max-other-cpu", 0, "repeat a run during which other processes used more than this many CPUs (0: never)")
	fs.IntVar(&o.attempts, "attempts", 3, "most attempts per run with -max-other-cpu")
	fs.IntVar(&o.rttProbes, "rtt-probes", 500, "uncontended READs timed to measure the fabric round trip")
	fs.DurationVar(&o.casBackoff, "cas-backoff", 0, "CAS-B initial backoff (default: 1862ns scaled by RTT/2µs)")
	fs.IntVar(&o.casUpdateBatch, "cas-update-batch", 0, fmt.Sprintf("CAS-B: reconsider SMART's backoff limit only once per this many acquisitions of a client, as the authors' artifact does (%d); 0: at every one (settles within milliseconds: what a 10-s run averages to, in a short window)", baseline.ArtifactUpdateBatch))
	fs.StringVar(&o.readerPoll, "reader-poll", "backoff", "ShiftLock's READ polling interval: backoff (20µs doubling to 1ms), rtt (1862ns scaled by RTT/2µs, fixed, as the artifact), or a duration")
	fs.IntVar(&o.writerRun, "writer-run", 0, "ShiftLock's N: the most consecutive writers before waiting readers get the lock (0: the client's default, 16; ShiftLock §4.7)")
	fs.DurationVar(&o.dslrOmega, "dslr-omega", 0, "DSLR ω, wait per ticket ahead (default: 5µs scaled by RTT/2µs, or 1862ns with -artifact-omega)")
	fs.BoolVar(&o.artifactOmega, "artifact-omega", false, "DSLR's ω as the ShiftLock authors' artifact runs it (its backoff parameter, 1862ns, scaled by RTT/2µs) instead of DSLR's published 5µs")
	fs.DurationVar(&o.dslrBase, "dslr-backoff", 0, "DSLR random backoff base R (default: 10µs scaled by RTT/2µs)")
	fs.StringVar(&o.rangeSizesFlag, "range-sizes", "", "citron, ss: span lengths, comma-separated; clients take them in turn (CITRON's mixed workload: 1,16,256)")
	fs.IntVar(&o.rangeDepth, "range-depth", 8, "citron, ss: depth of the range tree; the space is 64 x 4^depth units")
	fs.DurationVar(&o.rangeWait, "range-wait", 0, "citron: T_wait (default: CITRON's 15µs on the model, rangelock's 2ms elsewhere)")
	fs.BoolVar(&o.rangeFast, "range-fastpath", true, "citron: CITRON's fast path (§3.8): a writer on a node above leaves takes every bit below it and skips T_wait")
	fs.Uint64Var(&o.ssSegment, "ss-segment", 1, "ss: units per segment")
	fs.Uint64Var(&o.switchCapacity, "switch-capacity", 1_680_000, "fisslock: locks the switch decides (IDs below it; the rest fall back to ParLock); FissLock §7.2 fits 1.68M on a Tofino")
	fs.DurationVar(&o.switchPacket, "switch-packet", time.Nanosecond, "fisslock, parlock: the emulated switch's time per packet")
	fs.DurationVar(&o.serverPacket, "server-packet", time.Microsecond, "fisslock, parlock: a server core's time per lock packet (agent pool or lock manager)")
	fs.StringVar(&o.memnodeBin, "memnode", "", "memnode binary for -fabric tcp (default: bin/memnode, or next to lockbench)")
	fs.StringVar(&o.memnodeCPUs, "memnode-cpus", "", "pin the memnode process to these CPUs (taskset -c list)")
	fs.IntVar(&o.memnodeProcs, "memnode-procs", 0, "GOMAXPROCS of the memnode process (0: Go's default)")
	fs.StringVar(&o.memnodeFlags, "memnode-flags", "", "extra flags for the memnode process, space separated")
	var err error
	if err = fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if *readers != "" {
		v, err := strconv.ParseFloat(*readers, 64)
		if err != nil || v < 0 || v > 1 {
			return o, fmt.Errorf("-readers %q: want a fraction in [0, 1]", *readers)
		}
		o.readers, o.workload = v, ""
		for name, r := range workloads {
			if r == v {
				o.workload = name
			}
		}
	} else {
		r, ok := workloads[strings.ToUpper(o.workload)]
		if !ok {
			return o, fmt.Errorf("-workload %q: want WI, RI or RO", o.workload)
		}
		o.workload, o.readers = strings.ToUpper(o.workload), r
	}
	o.recovery = o.recovery || o.failRate > 0
	if o.rangeSizes, err = parseSizes(o.rangeSizesFlag); err != nil {
		return o, err
	}
	return o, o.validate()
}

func (o options) validate() error {
	known := false
	for _, k := range lockKinds {
		known = known || k == o.lock
	}
	switch {
	case !known:
		return fmt.Errorf("-lock %q: want one of %s", o.lock, strings.Join(lockKinds, ", "))
	case o.fabric != "memfab" && o.fabric != "model" && o.fabric != "tcp" && !strings.HasPrefix(o.fabric, "tcp://"):
		return fmt.Errorf("-fabric %q: want memfab, model, tcp or tcp://host:port", o.fabric)
	case o.fabric == "model" && (o.modelVerb <= 0 || o.modelSend < 0):
		return errors.New("-model-verb must be positive and -model-send not negative")
	case o.fabric == "model" && o.recovery:
		return errors.New("-fabric model runs without failures (a posted Send's failure is not reported)")
	case o.clients < 1 || o.nodes < 1 || o.nodes > o.clients:
		return errors.New("need 1 <= -nodes <= -clients")
	case o.entries == 0:
		return errors.New("-entries must be positive")
	case o.duration <= 0 || o.warmup < 0 || o.hold < 0 || o.think < 0:
		return errors.New("-duration must be positive, -warmup and -hold not negative")
	case o.failRate < 0 || o.failRate >= 1:
		return errors.New("-fail-rate must be in [0, 1)")
	case o.recovery && !strings.HasPrefix(o.lock, "shiftlock") && o.lock != "dslr":
		return fmt.Errorf("-fail-rate/-recovery: %s is not fault tolerant (ShiftLock Table 1); only shiftlock and dslr recover", o.lock)
	case isRangeLock(o.lock) != (len(o.rangeSizes) > 0):
		return errors.New("-range-sizes goes with -lock citron or ss, and they need it")
	case isRangeLock(o.lock) && o.fabric != "memfab" && o.fabric != "model":
		return fmt.Errorf("-lock %s: range runs use -fabric memfab or model (a memnode process has no range region)", o.lock)
	case isRangeLock(o.lock) && (o.rangeDepth < 1 || o.rangeDepth > 12 || o.maxRangeSize() > rangeTree(o).Units()):
		return fmt.Errorf("-range-depth %d: want 1..12, with room for spans of %d", o.rangeDepth, o.maxRangeSize())
	case o.lock == "ss" && (o.ssSegment == 0 || (rangeTree(o).Units()+o.ssSegment-1)/o.ssSegment > o.entries):
		return fmt.Errorf("-ss-segment %d: need a positive segment and -entries >= %d", o.ssSegment, (rangeTree(o).Units()+max(o.ssSegment, 1)-1)/max(o.ssSegment, 1))
	case isFiss(o.lock) && o.fabric != "memfab" && o.fabric != "model":
		return fmt.Errorf("-lock %s: its switch is emulated in-process; use -fabric memfab or model", o.lock)
	case o.iopsCap < 0:
		return errors.New("-iops-cap must not be negative")
	}
	if o.readerPoll != "rtt" && o.readerPoll != "backoff" {
		if d, err := time.ParseDuration(o.readerPoll); err != nil || d <= 0 {
			return fmt.Errorf("-reader-poll %q: want rtt, backoff or a positive duration", o.readerPoll)
		}
	}
	if _, err := keydist.Parse(o.keys, o.keyDomain()); err != nil {
		return err
	}
	return nil
}

// workloadName is the workload as reported: WI/RI/RO or the reader share,
// after the span lengths of a range run.
func (o options) workloadName() string {
	w := o.workload
	if w == "" {
		w = fmt.Sprintf("R%g%%", 100*o.readers)
	}
	if len(o.rangeSizes) > 0 {
		w = "L=" + o.rangeSizesFlag + " " + w
	}
	return w
}

// lockName is the lock as reported: ss with its segment size.
func (o options) lockName() string {
	switch {
	case o.lock == "ss":
		return fmt.Sprintf("ss-%d", o.ssSegment)
	case o.lock == "citron" && !o.rangeFast:
		return "citron-nofast"
	case strings.HasPrefix(o.lock, "shiftlock") && o.writerRun > 0 && o.writerRun != shiftlockDefaultRun:
		return fmt.Sprintf("%s-n%d", o.lock, o.writerRun)
	}
	return o.lock
}

// keyDomain is how many keys -keys draws from: lock entries, or a range
// run's left borders.
func (o options) keyDomain() uint64 {
	if isRangeLock(o.lock) && len(o.rangeSizes) > 0 {
		return rangeDomain(o)
	}
	return o.entries
}

func (o options) maxRangeSize() uint64 {
	var m uint64
	for _, l := range o.rangeSizes {
		m = max(m, l)
	}
	return m
}

// fabricKind is the fabric as reported: memfab, model or tcpfab.
func (o options) fabricKind() string {
	switch o.fabric {
	case "memfab", "model":
		return o.fabric
	}
	return "tcpfab"
}

// shiftlockDefaultRun is shiftlock.Config.Threshold's default, N = 16
// (ShiftLock §4.7).
const shiftlockDefaultRun = 16

// isFiss reports whether kind is the emulated FissLock or its fallback.
func isFiss(kind string) bool { return kind == "fisslock" || kind == "parlock" }
