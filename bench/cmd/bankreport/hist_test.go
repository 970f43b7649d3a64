package main

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/shiftlock/shiftlock-proxy/bank"
)

// TestHistMatchesHdrHistogram: the bank's histogram (bank.Hist) replaced
// hdrhistogram-go in the product; every figure the bank prints or a report
// plots must stay what hdrhistogram-go gave, value for value, and result
// files must read both ways.
func TestHistMatchesHdrHistogram(t *testing.T) {
	ps := []float64{0, 0.1, 1, 10, 25, 50, 75, 90, 99, 99.9, 99.99, 100}
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 20 {
		lo, hi, digits := int64(1), int64(600_000_000), 2 // the bank's geometry
		if trial%4 == 3 {
			lo, hi, digits = int64(1+rng.IntN(1000)), int64(1_000_000+rng.IntN(1<<40)), 1+rng.IntN(5)
		}
		ours, theirs := bank.NewHist(lo, hi, digits), hdrhistogram.New(lo, hi, digits)
		n := rng.IntN(5000)
		if trial == 0 {
			n = 0
		}
		for range n {
			// Latency-like: mostly small, a long tail, a few out of range.
			v := int64(rng.ExpFloat64() * float64(1+rng.IntN(5000)))
			if rng.IntN(500) == 0 {
				v = hi + int64(rng.IntN(1000))
			}
			e1, e2 := ours.Record(v), theirs.RecordValue(v)
			if (e1 == nil) != (e2 == nil) {
				t.Fatalf("trial %d: Record(%d) = %v, hdrhistogram %v", trial, v, e1, e2)
			}
		}
		compareHist(t, trial, ours, theirs, ps)

		// Merge, and the snapshot both ways through JSON.
		other, otherH := bank.NewHist(lo, hi, digits), hdrhistogram.New(lo, hi, digits)
		for range 100 {
			v := int64(rng.IntN(100000))
			_, _ = other.Record(v), otherH.RecordValue(v)
		}
		if d1, d2 := ours.Merge(other), theirs.Merge(otherH); d1 != d2 {
			t.Fatalf("trial %d: Merge dropped %d, hdrhistogram %d", trial, d1, d2)
		}
		compareHist(t, trial, ours, theirs, ps)
		b, _ := json.Marshal(ours.Export())
		var hs hdrhistogram.Snapshot
		if err := json.Unmarshal(b, &hs); err != nil {
			t.Fatal(err)
		}
		compareHist(t, trial, ours, hdrhistogram.Import(&hs), ps)
		b, _ = json.Marshal(theirs.Export())
		var s bank.HistSnapshot
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		compareHist(t, trial, bank.ImportHist(&s), theirs, ps)
	}
}

func compareHist(t *testing.T, trial int, ours *bank.Hist, theirs *hdrhistogram.Histogram, ps []float64) {
	t.Helper()
	if ours.TotalCount() != theirs.TotalCount() || ours.Max() != theirs.Max() {
		t.Fatalf("trial %d: total %d max %d, hdrhistogram %d %d", trial, ours.TotalCount(), ours.Max(), theirs.TotalCount(), theirs.Max())
	}
	if a, b := ours.ValueAtPercentiles(ps), theirs.ValueAtPercentiles(append([]float64(nil), ps...)); !reflect.DeepEqual(a, b) {
		t.Fatalf("trial %d: percentiles %v, hdrhistogram %v", trial, a, b)
	}
	var bars []bank.Bar
	for _, b := range theirs.Distribution() {
		bars = append(bars, bank.Bar{From: b.From, To: b.To, Count: b.Count})
	}
	if got := ours.Distribution(); !reflect.DeepEqual(got, bars) {
		t.Fatalf("trial %d: %d bars, hdrhistogram %d", trial, len(got), len(bars))
	}
	if !reflect.DeepEqual(ours.Export().Counts, theirs.Export().Counts) {
		t.Fatalf("trial %d: counts differ", trial)
	}
}
