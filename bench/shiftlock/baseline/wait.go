package baseline

import (
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"
)

// spinLimit is the longest wait done by yielding rather than sleeping. Go's
// timers round a sleep up to about a millisecond when the process is idle,
// so the microsecond waits of backoff and polling would otherwise last a
// thousand times longer than the algorithms ask. The paper's clients
// busy-wait on their own core; yielding is the closest a goroutine sharing a
// core can come without starving the lock holder. The same threshold is used
// by shiftlock/locktest for critical sections.
var spinLimit atomic.Int64

func init() { spinLimit.Store(int64(200 * time.Microsecond)) }

// SetSpinLimit sets the longest wait done by yielding (default 200µs). A run
// on testing/synctest's fake clock sets 0: there a yield takes no time, so
// only a sleep lets the clock reach the end of a wait.
func SetSpinLimit(d time.Duration) { spinLimit.Store(int64(d)) }

// pause waits about d. A non-positive d still yields once, so that a retry
// loop never keeps the processor from the goroutine holding the lock.
func pause(d time.Duration) {
	if d <= 0 {
		runtime.Gosched()
		return
	}
	if int64(d) >= spinLimit.Load() {
		time.Sleep(d)
		return
	}
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		runtime.Gosched()
	}
}

// jitter is uniform in [0, d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d)))
}

// binaryExpBackoff is the truncated binary exponential random backoff of
// DSLR Appendix A.3: uniform in [0, min(base·2^(c-1), limit)] after the c-th
// consecutive failure (c ≥ 1).
func binaryExpBackoff(c int, base, limit time.Duration) time.Duration {
	if c < 1 {
		c = 1
	}
	w := limit
	if c-1 < 32 && base<<(c-1) < limit && base<<(c-1) > 0 {
		w = base << (c - 1)
	}
	return jitter(w + 1)
}
