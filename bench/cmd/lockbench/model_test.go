package main

import (
	"io"
	"os"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/shiftlock/shiftlock-proxy/bench/shiftlock/baseline"
)

// TestModel runs one lockbench measurement on the model fabric: memfab
// with an RDMA testbed's timing (bench/rdma/latfab) on testing/synctest's fake
// clock. Time passes only while every goroutine waits, so the latencies and
// the memory node's budget are exact, and the clients' CPU costs nothing,
// as on a testbed with a core per client thread. The run's flags come from
// LOCKBENCH_MODEL; without it the test is skipped. bench/scripts/bench-micro.sh
// builds this test into a binary and runs it once per measurement:
//
//	LOCKBENCH_MODEL='-lock shiftlock -keys zipf:0.99 -workload WI -duration 20ms -csv out.csv' \
//	    cd bench && go test ./cmd/lockbench -run '^TestModel$' -v
func TestModel(t *testing.T) {
	spec := os.Getenv("LOCKBENCH_MODEL")
	if spec == "" {
		t.Skip("LOCKBENCH_MODEL is not set")
	}
	o, err := parseRun(append(strings.Fields(spec), "-fabric", "model"), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	baseline.SetSpinLimit(0)
	defer baseline.SetSpinLimit(200_000)
	var r *result
	synctest.Test(t, func(t *testing.T) {
		r, err = runBench(o, os.Stderr)
	})
	if r != nil {
		if werr := emit(o, r, os.Stdout); werr != nil {
			t.Fatal(werr)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestModelFabric runs a short model measurement of every lock kind and
// checks what the model promises: the measured round trip is exactly the
// configured flight time plus one verb's service at the memory node, every lock completes cycles, the memory node never
// executes more verbs than its budget, and the hottest key is seen.
func TestModelFabric(t *testing.T) {
	baseline.SetSpinLimit(0)
	defer baseline.SetSpinLimit(200_000)
	for _, lock := range append(append([]string{}, verbLocks...), "fisslock", "parlock") {
		t.Run(lock, func(t *testing.T) {
			o, err := parseRun(strings.Fields("-fabric model -clients 24 -nodes 24 -entries 100000 -keys zipf:0.99 -workload WI "+
				"-duration 2ms -warmup 500us -progress=false -iops-cap 4000000 -reader-poll rtt -lock "+lock), os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			var r *result
			synctest.Test(t, func(t *testing.T) {
				r, err = runBench(o, io.Discard)
			})
			if err != nil {
				t.Fatal(err)
			}
			// 2 µs of flight plus 0.25 µs of service at 4M verbs/s.
			if r.RTTus != 2.25 {
				t.Errorf("measured round trip %vµs, want exactly 2.25µs", r.RTTus)
			}
			if r.Cycles == 0 || r.Errors != 0 {
				t.Errorf("%d cycles, %d errors", r.Cycles, r.Errors)
			}
			if r.MemnodeIOPS > 4e6*1.001 {
				t.Errorf("memory node executed %.0f verbs/s over a budget of 4M", r.MemnodeIOPS)
			}
			if r.HotRate <= 0 {
				t.Error("the hottest key was never asked for")
			}
		})
	}
}
