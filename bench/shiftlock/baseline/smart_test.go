package baseline

import (
	"testing"
	"time"
)

// TestSmartLimitAdapts: a retry rate above one half doubles the limit, up to
// initial·2^10; one under a tenth halves it, down to initial.
func TestSmartLimitAdapts(t *testing.T) {
	b := newSmartBackoff(time.Microsecond)
	for i := 0; i < 12; i++ {
		b.last = time.Now().Add(-time.Second)
		b.wait(0)
		b.wait(1)
		b.completed() // 2 retries, 1 completion
	}
	if got, want := b.Limit(), time.Microsecond<<smartMaxShift; got != want {
		t.Fatalf("limit after a high retry rate: %v, want the bound %v", got, want)
	}
	for i := 0; i < 12; i++ {
		b.last = time.Now().Add(-time.Second)
		b.completed() // no retries
	}
	if got := b.Limit(); got != time.Microsecond {
		t.Fatalf("limit after no retries: %v, want the initial %v", got, time.Microsecond)
	}
}

// TestSmartUpdateBatch: with a batch, as in the authors' artifact, the
// limit is reconsidered only at every batch-th completion, however long
// ago the last update was.
func TestSmartUpdateBatch(t *testing.T) {
	b := newSmartBackoff(time.Microsecond)
	b.batch = 4
	for i := 1; i <= 8; i++ {
		b.last = time.Now().Add(-time.Second)
		b.wait(0)
		b.wait(1)
		b.completed()
		want := time.Microsecond << (i / 4)
		if got := b.Limit(); got != want {
			t.Fatalf("after completion %d: limit %v, want %v", i, got, want)
		}
	}
}
