package fabrictest

import (
	"testing"
	"time"
)

// The suite's deadlines are native unless a fabric stretches them: the
// verbs tests in make test-verbs's TCG guest hit the 20 s context of the
// Atomics subtest at a host load of 14 (issue 36), while memfab and tcpfab
// must keep failing fast on a hang.
func TestDeadlinesStretchTheSuite(t *testing.T) {
	left := func(s suite) time.Duration {
		dl, ok := s.ctx(t).Deadline()
		if !ok {
			t.Fatal("a suite context without a deadline")
		}
		return time.Until(dl)
	}
	var native suite
	if d := left(native); d > 20*time.Second || d < 19*time.Second {
		t.Fatalf("native subtest context ends in %v, want 20 s", d)
	}
	var slow suite
	Deadlines(func(d time.Duration) time.Duration { return 10 * d })(&slow)
	if d := left(slow); d < 199*time.Second || d > 200*time.Second {
		t.Fatalf("stretched subtest context ends in %v, want 200 s", d)
	}
	if d := slow.bound(5 * time.Second); d != 50*time.Second {
		t.Fatalf("stretched delivery wait %v, want 50 s", d)
	}
}
