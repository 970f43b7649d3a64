package baseline

import (
	"sync"
	"sync/atomic"
	"time"
)

// SMART's truncated exponential backoff (Ren et al., ASPLOS '24, §4.3), as the
// ShiftLock authors' artifact applies it to the CAS lock: the k-th retry of
// one acquisition waits min(limit, initial·2^min(k,10)) plus a jitter uniform
// in [0, initial); every millisecond the limit halves (down to initial) if
// fewer than 10% of attempts were retries and doubles (up to initial·2^10) if
// more than half were.
//
// The artifact looks at the clock only after every batch of 64 acquisitions
// (CASConfig.UpdateBatch). Where acquisitions are slow that makes the limit
// adapt slowly: on one lock shared by 240 clients, each completes about 66 a
// second while the limit is still at its start, so the first doubling comes
// after about a second. Without the batch the limit settles within
// milliseconds.
const (
	smartMaxShift   = 10
	smartLowWater   = 0.1
	smartHighWater  = 0.5
	smartUpdateEach = time.Millisecond
)

// ArtifactUpdateBatch is the artifact's batch of acquisitions between two
// looks at the clock (client.rs, BATCH).
const ArtifactUpdateBatch = 64

// DefaultInitialBackoff is the artifact's default initial backoff (1862 ns),
// chosen for an RDMA round trip of about 2 µs (ShiftLock Table 3, IA with 5
// clients).
const DefaultInitialBackoff = 1862 * time.Nanosecond

// smartBackoff is the adaptive limit. The artifact keeps one per client
// thread; here one is shared by all acquisitions through a Locker (one client
// node), which sees the same retry rate.
type smartBackoff struct {
	initial time.Duration
	limit   atomic.Int64 // current limit in ns

	retries, done atomic.Uint64
	mu            sync.Mutex
	last          time.Time
	batch         uint64 // acquisitions between looks at the clock (0: every one)
	sinceLook     atomic.Uint64
}

func newSmartBackoff(initial time.Duration) *smartBackoff {
	b := &smartBackoff{initial: initial, last: time.Now()}
	b.limit.Store(int64(initial))
	return b
}

// wait is the pause before retry k (k ≥ 0) of an acquisition.
func (b *smartBackoff) wait(k int) time.Duration {
	b.retries.Add(1)
	d := b.initial << min(k, smartMaxShift)
	if l := time.Duration(b.limit.Load()); d > l {
		d = l
	}
	return d + jitter(b.initial)
}

// completed records a successful acquisition and, once per period, adapts
// the limit to the retry rate seen since the last update.
func (b *smartBackoff) completed() {
	b.done.Add(1)
	if b.batch > 0 && b.sinceLook.Add(1)%b.batch != 0 {
		return
	}
	if !b.mu.TryLock() {
		return
	}
	defer b.mu.Unlock()
	now := time.Now()
	if now.Sub(b.last) < smartUpdateEach {
		return
	}
	b.last = now
	r, d := b.retries.Swap(0), b.done.Swap(0)
	if r+d == 0 {
		return
	}
	rate := float64(r) / float64(r+d)
	l := time.Duration(b.limit.Load())
	switch {
	case rate < smartLowWater:
		l = max(b.initial, l/2)
	case rate > smartHighWater:
		l = min(b.initial<<smartMaxShift, l*2)
	}
	b.limit.Store(int64(l))
}

// Limit is the current backoff limit.
func (b *smartBackoff) Limit() time.Duration { return time.Duration(b.limit.Load()) }
