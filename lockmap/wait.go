package lockmap

import (
	"path"
	"time"
)

// WaitPolicy decides how long an exclusive acquire (Redis SET NX) may wait
// in the lock's queue before it answers "not acquired" (DESIGN §5). Redis
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
