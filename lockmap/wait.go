package lockmap

import (
	"path"
	"sync"
	"sync/atomic"
	"time"
)

// WaitPolicy decides how long an exclusive acquire (Redis SET NX) may wait
// in the lock's queue before it answers "not acquired" (docs/compatibility.md, "Waiting"). Redis
// itself never waits; waiting is where the proxy beats retry loops, but a
// grant that arrives after the client gave up leaves a lock held for its
// whole TTL, so the default budget is a fraction of the requested TTL, kept
// below the per-attempt deadlines of common clients: redsync gives each
// attempt 5% of the expiry, so the default fraction is 4%.
type WaitPolicy struct {
	// Rules are tried in order; the first whose glob Pattern (path.Match
	// syntax) matches the key applies. No match means Auto.
	Rules []WaitRule
	// Fraction of the TTL used by Auto (default 0.04).
	Fraction float64
	// Max caps Auto (default 2s). Auto never waits for a lock requested
	// without a TTL: a late grant to a client that gave up would then be
	// held forever.
	Max time.Duration
	// WaitFirstTry has Auto wait on an acquire's first try too. Without
	// it (the default), a first try is answered at once, as Redis answers
	// it, and only a retry waits (BudgetFor).
	WaitFirstTry bool
}

// WaitRule sets the budget for keys matching Pattern. Auto uses the
// TTL-fraction rule; otherwise Wait is fixed (0 = exact try-lock).
type WaitRule struct {
	Pattern string
	Auto    bool
	Wait    time.Duration
}

// Budget is how long an acquire of key with the given TTL may wait.
func (p WaitPolicy) Budget(key string, ttl time.Duration) time.Duration {
	for _, r := range p.Rules {
		if ok, _ := path.Match(r.Pattern, key); ok {
			if !r.Auto {
				return r.Wait
			}
			break
		}
	}
	frac, max := p.Fraction, p.Max
	if frac <= 0 {
		frac = 0.04
	}
	if max <= 0 {
		max = 2 * time.Second
	}
	if ttl <= 0 {
		return 0
	}
	w := time.Duration(float64(ttl) * frac)
	if w > max {
		w = max
	}
	return w
}

// BudgetFor is Budget for an acquire of key by token, on a client
// connection with habit, given what retries remembers. Waiting serves
// clients that retry: they are handed the lock in their turn instead of
// sleeping and trying again. It must not hurt those that do not: a client
// that tries once (bsm/redislock by default, redis-py's
// Lock(blocking=False)) wants Redis's answer at once, and one that holds a
// pooled connection while it waits takes it from its other callers. So,
// under Auto and unless WaitFirstTry:
//   - a retry, the same key and token refused before (every lock client
//     retries with the value it tried with), waits, but no longer than the
//     client waited before retrying: that is how long it would have slept
//     before its next try, so the proxy never holds it longer than it would
//     have held itself, and hands it the lock meanwhile if the holder lets
//     go (redsync retries after 50-250 ms, redis-py's blocking Lock after
//     100 ms, node-redlock after 200 ms plus jitter). The connection learns
//     that habit;
//   - a first try waits only on a connection that has retried before, for
//     the whole budget; on any other it is answered at once, as on Redis.
//     That connection's client has shown that it comes back after a
//     refusal, so a first try refused after a short wait only sends it to
//     sleep and to the back of the queue. Capping these waits at the
//     connection's last retry gap (as it was at first) kept redsync's
//     hot-key transactions out of their turn: bench-bank hotspot, p999
//     316-440 ms against 72-84 ms with the whole budget. A retry keeps its
//     cap: it is the client's own deadline (bsm/redislock's LinearBackoff
//     x 2 gives up 10 ms after a refusal, and Redis would have refused it).
//     The price: a caller that tries once, on a pooled connection that a
//     retrying caller of the same pool used before, waits too;
//   - on a connection whose client is known to bound each try by a
//     deadline longer than the budget (Habit.Patient: redsync, 5% of the
//     expiry), every try waits the whole budget, first tries and retries.
//     redsync retries 32 times by default, and a refusal only sends it to
//     sleep 50-250 ms: 50 clients on a hot key holding 1 ms had a p99 time
//     to acquire of 250 ms, against 100-210 ms when every try waited, and
//     a retry capped at its gap was refused again behind a longer queue
//     (max 0.9-1.3 s on a loaded machine).
//
// A fixed rule's budget applies to every try: whoever set it knows the
// clients of those keys.
func (p WaitPolicy) BudgetFor(retries *Retries, habit *Habit, key, token string, ttl time.Duration) time.Duration {
	for _, r := range p.Rules {
		if ok, _ := path.Match(r.Pattern, key); ok {
			if !r.Auto {
				return r.Wait
			}
			break
		}
	}
	b := p.Budget(key, ttl)
	if b == 0 || p.WaitFirstTry || retries == nil {
		return b
	}
	if habit != nil && habit.patient.Load() {
		return b // every try waits: no need to look up whether this one is a retry
	}
	if gap, ok := retries.since(key, token); ok {
		if habit != nil && !habit.retried.Load() { // as Patient: write the shared line once
			habit.retried.Store(true)
		}
		return min(b, gap)
	}
	if habit != nil && habit.retried.Load() {
		return b
	}
	return 0
}

// Habit is what one client connection has shown of its retries: whether
// it has retried a refused acquire, and whether its client is one that
// bounds each try itself (Patient). The zero value, a connection that has
// shown neither, is the one to start from.
type Habit struct {
	retried atomic.Bool
	patient atomic.Bool
}

// Patient records that the connection's client bounds every try of an
// acquire by a deadline of its own, longer than the wait budget (the
// proxy recognises redsync by its scripts), so that every try of it may
// wait the whole budget (BudgetFor).
func (h *Habit) Patient() {
	if !h.patient.Load() { // most calls: no write to a shared line
		h.patient.Store(true)
	}
}

// Retries remembers recent refusals of acquires, by key and token, to tell
// a retry from a first try (WaitPolicy.BudgetFor). The zero value is
// empty and ready.
type Retries struct {
	shards [64]retryShard
}

type retryShard struct {
	mu sync.Mutex
	at map[uint64]int64 // owner tag of key and token -> refusal, Unix ns
}

const (
	// retryMemory is how long a refusal makes the next try a retry: longer
	// than any client's retry interval.
	retryMemory = 30 * time.Second
	// retryShardMax bounds a shard; past it, refusals older than
	// retryMemory are forgotten, and if that is not enough, all of them
	// (their next tries are then first tries: answered at once).
	retryShardMax = 4096
)

// Refused records that key was refused to token just now.
func (r *Retries) Refused(key, token string) {
	tag := ownerTag(key, token)
	now := time.Now().UnixNano()
	sh := &r.shards[tag%uint64(len(r.shards))]
	sh.mu.Lock()
	if sh.at == nil {
		sh.at = map[uint64]int64{}
	}
	if len(sh.at) >= retryShardMax {
		for k, t := range sh.at {
			if now-t > int64(retryMemory) {
				delete(sh.at, k)
			}
		}
		if len(sh.at) >= retryShardMax {
			clear(sh.at)
		}
	}
	sh.at[tag] = now
	sh.mu.Unlock()
}

// since is how long ago key was last refused to token, if it was within
// retryMemory.
func (r *Retries) since(key, token string) (time.Duration, bool) {
	tag := ownerTag(key, token)
	sh := &r.shards[tag%uint64(len(r.shards))]
	sh.mu.Lock()
	t, ok := sh.at[tag]
	sh.mu.Unlock()
	if !ok {
		return 0, false
	}
	gap := time.Duration(time.Now().UnixNano() - t)
	if gap > retryMemory || gap < 0 {
		return 0, false
	}
	return gap, true
}
