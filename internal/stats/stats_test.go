package stats

import (
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	xs := []float64{3, 1, 2}
	if m := Median(xs); m != 2 {
		t.Fatalf("Median odd = %v", m)
	}
	if xs[0] != 3 {
		t.Fatal("Median sorted its argument")
	}
	if m := Median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Fatalf("Median even = %v", m)
	}
	if m := Median([]time.Duration{time.Second, 3 * time.Second}); m != 2*time.Second {
		t.Fatalf("Median durations = %v", m)
	}
	if m := Median[float64](nil); m != 0 {
		t.Fatalf("Median empty = %v", m)
	}
}
