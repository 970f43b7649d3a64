package shiftlock

import (
	"testing"
	"time"
)

// TestCheckPace: up to checkBudget waiters check every CheckInterval; past
// it their intervals grow with the number of waiters, estimated from the
// checks alone, and shrink back once the waiters are gone.
func TestCheckPace(t *testing.T) {
	base := 100 * time.Millisecond
	t0 := time.Unix(1000, 0)
	var p checkPace
	window := func(start time.Time, waiters int, elapsed time.Duration) time.Duration {
		var iv time.Duration
		for i := 0; i < waiters; i++ {
			iv = p.next(start.Add(time.Duration(i)*base/time.Duration(waiters+1)), base, elapsed)
		}
		return iv
	}
	if iv := window(t0, checkBudget, base); iv != base {
		t.Fatalf("%d waiters: interval %v, want %v", checkBudget, iv, base)
	}
	// 20,000 waiters, each checking once per window: intervals of about
	// 20 CheckIntervals, so that they check about checkBudget times per
	// window together.
	window(t0.Add(base), 20000, base)
	iv := window(t0.Add(2*base), 20000, base)
	if iv < 18*base || iv > 22*base {
		t.Fatalf("20000 waiters checking every %v: next interval %v, want about %v", base, iv, 20*base)
	}
	// The same 20,000 at that pace: one window sees a twentieth of them,
	// each counting the 20 windows since its last check.
	iv = window(t0.Add(3*base), 1000, 20*base)
	if iv < 18*base || iv > 22*base {
		t.Fatalf("20000 waiters checking every %v: next interval %v, want about %v", 20*base, iv, 20*base)
	}
	// They are gone: two windows later a lone waiter checks every base.
	if iv := p.next(t0.Add(6*base), base, base); iv != base {
		t.Fatalf("a lone waiter after the crowd left: interval %v, want %v", iv, base)
	}
}
