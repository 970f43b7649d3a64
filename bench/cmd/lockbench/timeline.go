package main

import (
	"fmt"
	"os"
	"sync/atomic"
)

// writeTimeline appends goodput per timelineStep to path: one row per step
// with the run's identity, for goodput-over-time plots of failure runs.
func writeTimeline(path string, r *result, buckets []atomic.Uint64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if st, err := f.Stat(); err == nil && st.Size() == 0 {
		fmt.Fprintln(f, "lock,fabric,workload,keys,fail_rate,run,t_s,goodput")
	}
	step := timelineStep.Seconds()
	for i := range buckets {
		fmt.Fprintf(f, "%s,%s,%s,%s,%g,%d,%.1f,%.0f\n", r.Lock, r.Fabric, r.Workload, r.Keys, r.FailRate, r.Run,
			float64(i)*step, float64(buckets[i].Load())/step)
	}
	return f.Close()
}
