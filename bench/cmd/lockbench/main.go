// Command lockbench runs the microbenchmarks of ShiftLock §4.2 (Fig. 4-6)
// and §4.8 (Fig. 13): clients repeatedly acquire a lock and release it, on
// ShiftLock or one of its baselines (bench/shiftlock/baseline), over memfab or a
// real memnode process.
//
//	lockbench -lock shiftlock -fabric tcp -workload WI -keys zipf:0.99 -csv out/micro.csv
//	lockbench plot -csv out/micro.csv -out docs/img
//	lockbench summary -csv out/micro.csv -doc docs/benchmarks/micro.md -img ../img
//
// A run reports goodput (acquire-release cycles per second), acquire latency
// percentiles for readers and writers, and the verbs per cycle read from the
// client endpoints' counters. bench/scripts/bench-micro.sh runs the whole grid.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

// retryPause is how long a disturbed run waits before it is repeated.
const retryPause = 3 * time.Second

func main() { os.Exit(mainArgs(os.Args[1:], os.Stdout, os.Stderr)) }

func mainArgs(args []string, stdout, stderr io.Writer) int {
	var err error
	switch {
	case len(args) > 0 && args[0] == "plot":
		err = plotCmd(args[1:], stderr)
	case len(args) > 0 && args[0] == "rtt":
		err = rttCmd(args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "summary":
		err = summaryCmd(args[1:], stderr)
	case len(args) > 0 && args[0] == "sensitivity":
		err = sensitivityCmd(args[1:], stderr)
	case len(args) > 0 && args[0] == "table":
		err = tableCmd(args[1:], stderr)
	default:
		err = runCmd(args, stdout, stderr)
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "lockbench:", err)
		return 1
	}
	return 0
}

func runCmd(args []string, stdout, stderr io.Writer) error {
	o, err := parseRun(args, stderr)
	if err != nil {
		return err
	}
	if o.fabric == "model" {
		return errors.New("-fabric model needs testing/synctest's fake clock, which only a test can start: " +
			"cd bench && LOCKBENCH_MODEL='-lock shiftlock ...' go test ./cmd/lockbench -run '^TestModel$' (bench/scripts/bench-micro.sh does)")
	}
	var r *result
	for attempt := 1; ; attempt++ {
		r, err = runBench(o, stderr)
		if r != nil {
			r.Attempts = attempt
		}
		// The machine is shared: a run during which other processes took
		// much CPU measured them as much as the lock, so it is done again,
		// a few seconds later, up to -attempts times; the CSV keeps the
		// last attempt and how many there were.
		if err != nil || r == nil || o.maxOtherCPU <= 0 || r.OtherCPU <= o.maxOtherCPU || attempt >= o.attempts {
			break
		}
		fmt.Fprintf(stderr, "lockbench: other processes used %.2f CPUs during the run (limit %.2f); again in %v\n", r.OtherCPU, o.maxOtherCPU, retryPause)
		time.Sleep(retryPause)
	}
	if r != nil {
		if werr := emit(o, r, stdout); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

// emit prints a run's row and appends it to the CSV.
func emit(o options, r *result, stdout io.Writer) error {
	printTable(stdout, []result{*r})
	fmt.Fprintf(stdout, "cycles=%d abandoned=%d errors=%d rtt=%.1fµs hot_key=%.0f/s held %.1f%% asked-or-held %.1f%% %s\n", r.Cycles, r.Abandoned, r.Errors, r.RTTus, r.HotRate, 100*r.HotBusy, 100*r.HotAsked, r.Stats)
	if o.csv != "" {
		return appendCSV(o.csv, r)
	}
	return nil
}
