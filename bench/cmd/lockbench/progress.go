package main

import (
	"fmt"
	"io"
	"time"
)

// startProgress prints a line per second to stderr: the phase, goodput over
// the last second, and the memnode's CPU use when lockbench started it.
func startProgress(o options, b *bench, ws []*worker, cl *cluster, w io.Writer) (stop func()) {
	if !o.progress {
		return func() {}
	}
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var last uint64
		lastM := memnodeCPU(cl)
		lastT := time.Now()
		for {
			select {
			case <-quit:
				return
			case now := <-t.C:
				var n uint64
				for _, x := range ws {
					n += x.all.Load()
				}
				dt := now.Sub(lastT).Seconds()
				phase := "warm-up"
				if b.phase.Load() == phaseMeasure {
					phase = "measure"
				}
				line := fmt.Sprintf("  %5.1fs %-7s %9.0f cycles/s", now.Sub(b.start).Seconds(), phase, float64(n-last)/dt)
				if m := memnodeCPU(cl); m >= 0 && lastM >= 0 {
					line += fmt.Sprintf("  memnode cpu %3.0f%%", 100*(m-lastM).Seconds()/dt)
					lastM = m
				}
				fmt.Fprintln(w, line)
				last, lastT = n, now
			}
		}
	}()
	return func() { close(quit); <-done }
}
