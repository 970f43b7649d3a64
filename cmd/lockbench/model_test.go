package main

import (
	"os"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/shiftlock/shiftlock-proxy/shiftlock/baseline"
)

// TestModel runs one lockbench measurement on the model fabric: memfab
// with an RDMA testbed's timing (rdma/latfab) on testing/synctest's fake
// clock. Time passes only while every goroutine waits, so the latencies and
// the memory node's budget are exact, and the clients' CPU costs nothing,
// as on a testbed with a core per client thread. The run's flags come from
// LOCKBENCH_MODEL; without it the test is skipped. scripts/bench-micro.sh
// builds this test into a binary and runs it once per measurement:
//
//	LOCKBENCH_MODEL='-lock shiftlock -keys zipf:0.99 -workload WI -duration 20ms -csv out.csv' \
//	    go test ./cmd/lockbench -run '^TestModel$' -v
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
