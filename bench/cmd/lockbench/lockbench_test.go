package main

import (
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestUncontendedCycle: with one client on spread-out keys nothing ever
// waits, so every lock spends exactly one atomic to acquire and one to
// release, and nothing else; the run's counters must say so.
func TestUncontendedCycle(t *testing.T) {
	for _, kind := range verbLocks {
		t.Run(kind, func(t *testing.T) {
			r := uncontended(t, kind)
			if r.Cycles < 100 {
				t.Fatalf("only %d cycles", r.Cycles)
			}
			// The cycle in flight at either edge of the window has its
			// verbs counted on one side and itself on the other: at most
			// two verbs off at each edge.
			n := float64(r.Cycles)
			if d := math.Abs(r.Atomics*n - 2*n); d > 4.5 {
				t.Errorf("%.4f atomics per cycle over %d cycles, want 2", r.Atomics, r.Cycles)
			}
			if r.Reads != 0 || r.Writes != 0 || r.Sends != 0 {
				t.Errorf("reads %.3f writes %.3f sends %.3f per cycle, want none", r.Reads, r.Writes, r.Sends)
			}
			if r.WP50 <= 0 || r.Goodput <= 0 {
				t.Errorf("no latency or goodput recorded: %+v", r)
			}
		})
	}
}

// uncontended runs lock kind with one client on spread-out keys.
func uncontended(t *testing.T, kind string) *result {
	t.Helper()
	o, err := parseRun([]string{"-lock", kind, "-clients", "1", "-nodes", "1", "-entries", "4096",
		"-keys", "uniform", "-duration", "200ms", "-warmup", "50ms", "-progress=false", "-rtt-probes", "10"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r, err := runBench(o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestUncontendedFissLock: an uncontended FissLock cycle is one packet to
// the switch to acquire and one (FREE) to release, with no server work; its
// fallback alone, with every lock managed on the requester's machine, is
// two packets on that machine's core and none through the switch.
func TestUncontendedFissLock(t *testing.T) {
	for kind, want := range map[string]string{
		"fisslock": "switch_pkts_per_cycle=2.00 server_pkts_per_cycle=0.00",
		"parlock":  "switch_pkts_per_cycle=0.00 server_pkts_per_cycle=2.00",
	} {
		t.Run(kind, func(t *testing.T) {
			r := uncontended(t, kind)
			if r.Cycles < 100 || !strings.Contains(r.Stats, want) || r.Atomics+r.Reads+r.Writes+r.Sends != 0 {
				t.Fatalf("%d cycles, %.2f verbs per cycle, counters %q; want %q and no verbs", r.Cycles, r.Atomics+r.Reads+r.Writes+r.Sends, r.Stats, want)
			}
		})
	}
}

// TestRangeRuns: range runs of both kinds complete cycles on memfab with
// mixed span sizes, and bad range options are refused.
func TestRangeRuns(t *testing.T) {
	for _, lock := range []string{"citron", "ss"} {
		t.Run(lock, func(t *testing.T) {
			o, err := parseRun(strings.Fields("-lock "+lock+" -range-sizes 1,16,256 -range-depth 5 -ss-segment 16 -entries 65536 "+
				"-clients 8 -nodes 2 -keys zipf:0.9 -readers 0.3 -duration 200ms -warmup 50ms -progress=false -rtt-probes 10"), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			r, err := runBench(o, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if r.Cycles == 0 || r.Errors != 0 {
				t.Fatalf("%d cycles, %d errors", r.Cycles, r.Errors)
			}
			if r.Workload != "L=1,16,256 R30%" {
				t.Errorf("workload %q", r.Workload)
			}
		})
	}
	for _, args := range []string{
		"-lock citron",                                        // no sizes
		"-lock shiftlock -range-sizes 16",                     // sizes without a range lock
		"-lock citron -range-sizes 16 -fabric tcp",            // no range region on a memnode process
		"-lock ss -range-sizes 16 -ss-segment 1 -entries 100", // too few segments
		"-lock citron -range-sizes 0",
	} {
		if _, err := parseRun(strings.Fields(args), io.Discard); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
}

func TestCSVRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.csv")
	a := result{Time: "t", Label: "x", Run: 2, Lock: "dslr", Fabric: "tcpfab", Clients: 240, Entries: 10, Keys: "zipf:0.99",
		Workload: "WI", Readers: 0.5, Goodput: 1234.5, RP99: -1, WP99: 17.25, Reads: 7.92, Recovery: 1, Stats: "a=1 b=2", Params: "p, q"}
	b := a
	b.Run, b.Goodput = 3, 99
	for _, r := range []result{a, b} {
		if err := appendCSV(path, &r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := readCSV(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []result{a, b}) {
		t.Fatalf("read back\n%+v\nwant\n%+v", got, []result{a, b})
	}
}

// TestCSVOlderHeader: appending to a file with fewer columns follows its
// header, so the file stays readable.
func TestCSVOlderHeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.csv")
	if err := os.WriteFile(path, []byte("lock,goodput\nmcs,5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := appendCSV(path, &result{Lock: "dslr", Goodput: 7, Attempts: 2}); err != nil {
		t.Fatal(err)
	}
	got, err := readCSV(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := []result{{Lock: "mcs", Goodput: 5}, {Lock: "dslr", Goodput: 7}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestTargets checks the verdicts on made-up rounds: ShiftLock at 1.5x the
// best baseline's goodput in every round meets the first target, a writer
// p99 above a baseline's misses the second.
func TestTargets(t *testing.T) {
	var rs []result
	for round := 1; round <= 3; round++ {
		add := func(lock, wl, keys string, goodput, wp99 float64) {
			rs = append(rs, result{Run: round, Lock: lock, Fabric: "tcpfab", IOPSCap: 1000, Workload: wl, Keys: keys, Goodput: goodput, WP99: wp99})
		}
		add("shiftlock", "WI", "zipf:0.99", 30*float64(round), 10)
		add("mcs", "WI", "zipf:0.99", 20*float64(round), 5)
		add("dslr", "WI", "zipf:0.99", 10, 50)
		add("shiftlock", "RI", "zipf:0.99", 30, 10)
		add("dslr", "RI", "zipf:0.99", 10, 20)
		add("shiftlock", "WI", "uniform", 95, 1)
		add("cas-b", "WI", "uniform", 100, 1)
	}
	var b strings.Builder
	renderTargets(&b, rs, aggregate(rs), "tcpfab-cap1k")
	out := b.String()
	for _, want := range []string{
		"| goodput ≥ 1.5x best baseline, Zipf WI | shiftlock | 1.50 | 1.50, 1.50, 1.50 | mcs x3 | met |",
		"| writer p99 below every baseline, Zipf WI (ratio to the lowest) | shiftlock | 2.00 | 2.00, 2.00, 2.00 | mcs x3 | **missed** |",
		"| writer p99 below every baseline, Zipf RI (ratio to the lowest) | shiftlock | 0.50 | 0.50, 0.50, 0.50 | dslr x3 | met |",
		"| goodput within 10% of best baseline, uniform WI | shiftlock | 0.95 | 0.95, 0.95, 0.95 | cas-b x3 | met |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

// TestSensitivity checks that the sweep's verdicts are taken per point:
// the same locks meet the targets at one Send latency and miss them at
// another, and each point names its best baseline.
func TestSensitivity(t *testing.T) {
	var rs []result
	for round := 1; round <= 3; round++ {
		for _, send := range []string{"2µs", "3µs"} {
			slow := 1.0
			if send == "3µs" {
				slow = 2
			}
			add := func(lock, wl string, goodput, wp99, atomics float64) {
				rs = append(rs, result{Run: round, Lock: lock, Fabric: "model", Workload: wl, Keys: "zipf:0.99",
					Goodput: goodput, WP99: wp99, Atomics: atomics, Params: "rtt=2µs send=" + send + " think=5µs"})
			}
			add("shiftlock-nobump", "WI", 16/slow, 40*slow, 2)
			add("cas-b", "WI", 7, 90, 3.3)
			add("mcs", "WI", 9/slow, 50*slow, 1.9)
			add("shiftlock-nobump", "RI", 15, 10, 2)
			add("mcs", "RI", 9/slow, 50, 1.9)
		}
	}
	var b strings.Builder
	renderSensitivity(&b, rs)
	out := b.String()
	for _, want := range []string{
		"| 2µs | 5µs | shiftlock-nobump | 1.78 (mcs) | 0.80 (mcs) | 1.67 | - | 3.30 | all met |",
		"| 3µs | 5µs | shiftlock-nobump | 1.14 (cas-b) | 0.89 (cas-b) | 3.33 | - | 3.30 | **missed**: goodput |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

// TestLimiterBudget: the burst is spent at once, and past it a verb waits
// for budget that (at one verb an hour) does not come.
func TestLimiterBudget(t *testing.T) {
	l := newLimiter(1.0/3600, 3*time.Hour) // a bucket of 3 verbs
	defer l.stop()
	l.take(3)
	done := make(chan struct{})
	go func() { l.take(1); close(done) }()
	queued := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.queue) - l.head
	}
	// Wait for the verb to queue rather than sleeping: a loaded host may
	// start the goroutine late.
	for end := time.Now().Add(30 * time.Second); queued() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the verb never queued")
		}
	}
	select {
	case <-done:
		t.Fatal("a verb went past an empty budget")
	case <-time.After(50 * time.Millisecond):
	}
	if n := queued(); n != 1 {
		t.Fatalf("%d verbs queued, want 1", n)
	}
}
