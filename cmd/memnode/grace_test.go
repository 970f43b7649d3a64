package main

import (
	"testing"
	"time"
)

// TestGraceLeft: a first start has no grace to wait, and says 0s, not the
// least Duration there is.
func TestGraceLeft(t *testing.T) {
	if got := graceLeft(time.Time{}); got != 0 {
		t.Errorf("no grace: %v", got)
	}
	if got := graceLeft(time.Now().Add(-time.Second)); got != 0 {
		t.Errorf("a grace over: %v", got)
	}
	if got := graceLeft(time.Now().Add(time.Minute)); got <= 59*time.Second || got > time.Minute {
		t.Errorf("a minute's grace: %v", got)
	}
}
