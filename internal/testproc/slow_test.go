package testproc

import (
	"testing"
	"time"
)

func TestSlow(t *testing.T) {
	t.Setenv(SlowdownEnv, "")
	if d := Slow(20 * time.Second); d != 20*time.Second {
		t.Fatalf("unset: %v, want 20 s", d)
	}
	t.Setenv(SlowdownEnv, "10")
	if d := Slow(20 * time.Second); d != 200*time.Second {
		t.Fatalf("10: %v, want 200 s", d)
	}
	// A typo must not leave the guest's deadlines native without a word.
	for _, bad := range []string{"0", "-2", "ten", "1.5"} {
		t.Setenv(SlowdownEnv, bad)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s=%q: no panic", SlowdownEnv, bad)
				}
			}()
			Slow(time.Second)
		}()
	}
}
