package lockmap

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// Extend sets the TTL of key's hold by token, and only token's: an empty
// token is a token like any other (SET k "" NX takes one), never a
// wildcard. A non-positive TTL deletes, as PEXPIRE does in Redis.
func (m *Map) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	return m.extend(ctx, nil, key, token, false, ttl)
}

// ExtendAny is Extend for every holder of key, whatever its token: Redis's
// PEXPIRE, which names no token.
func (m *Map) ExtendAny(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	return m.extend(ctx, nil, key, "", true, ttl)
}

// extend is Extend and ExtendAny; lp is the Loop it runs for, nil where it
// may block.
func (m *Map) extend(ctx context.Context, lp *Loop, key, token string, anyHolder bool, ttl time.Duration) (bool, error) {
	onLoop := lp != nil
	if ttl <= 0 {
		if onLoop && lp.bell != nil {
			if anyHolder {
				return m.DeleteAsync(lp.bell, key) > 0, nil
			}
			return m.ReleaseAsync(lp.bell, key, token), nil
		}
		if onLoop && !m.Inline() {
			return false, ErrWouldBlock
		}
		if anyHolder {
			return m.Delete(key) > 0, nil
		}
		return m.Release(key, token), nil
	}
	s := m.shard(key)
	s.mu.Lock()
	cur, reaped := s.current(key)
	var hs []*hold
	for _, h := range cur {
		if anyHolder || h.token == token {
			hs = append(hs, h)
		}
	}
	s.mu.Unlock()
	m.reaped(reaped)
	if len(hs) == 0 {
		return false, nil
	}
	end := time.Now().Add(ttl)
	// A share of a lock held by the key's home (quorum routing): the home
	// runs its TTL, and says whether it still has it.
	local := hs[:0:0]
	extended := 0
	for _, h := range hs {
		fg := h.fwd()
		if fg == nil {
			local = append(local, h)
			continue
		}
		if onLoop {
			return false, ErrWouldBlock
		}
		ok, err := fg.extend(ctx, ttl)
		if err != nil {
			return false, err
		}
		if !ok {
			m.Release(key, h.token) // the home let it go: so does this instance
			continue
		}
		if m.setDeadline(h, end, ttl) {
			extended++
		}
	}
	if len(local) == 0 {
		return extended > 0, nil
	}
	hs = local
	d, _ := m.Where(key)
	if d.Lease != nil {
		p, covered, err := coverPinned(ctx, d.Lease, end, ttl, !onLoop)
		if err != nil {
			return false, err
		} else if !covered {
			return false, ErrWouldBlock // a heartbeat push first
		}
		defer p.unpin() // setDeadline has the expirer take the new deadline
	}
	// A hold whose TTL ran out while the lease was being extended stays
	// gone: Redis would have answered 0 had the command come that late.
	done := extended > 0
	for _, h := range hs {
		if m.setDeadline(h, end, ttl) {
			done = true
		}
	}
	return done, nil
}

// Reassign gives the holds of keys, held here by the tokens from (one per
// key), to token to, with TTL ttl, without letting go of any lock: Redis's
// SET of a new value over a key that has one, which bsm/redislock's obtain
// does when its caller re-obtains its own lock with new metadata. Letting go
// and taking the lock again would leave a moment in which someone else may
// take it, and a try that then fails would leave the caller with nothing.
//
// It is all or nothing, and the answer is false, with nothing changed, if a
// key is no longer held here by its from token, or if its hold cannot change
// hands in place. Only an exclusive hold whose grant is its own, on the
// current membership, can: a shadow's lock is held by its owner through
// another proxy under the old token, a routed share's by the key's home,
// which knows the owner by the old token's tag, and a shared hold shares its
// lock with other tokens. A key listed twice is held once, by one token, so
// it can only be listed with the same from token.
func (m *Map) Reassign(ctx context.Context, keys, from []string, to string, ttl time.Duration) (bool, error) {
	return m.reassign(ctx, false, keys, from, to, ttl)
}

func (m *Map) reassign(ctx context.Context, onLoop bool, keys, from []string, to string, ttl time.Duration) (bool, error) {
	if len(keys) != len(from) {
		return false, fmt.Errorf("lockmap: Reassign: %d keys but %d tokens", len(keys), len(from))
	}
	if ttl <= 0 {
		return false, ErrBadTTL
	}
	if ok, _ := m.changeHands(keys, from, "", 0, time.Time{}); !ok {
		return false, nil // checked first: a lease push for a refusal is wasted
	}
	end := time.Now().Add(ttl)
	var covered []*Domain
	for _, k := range keys {
		d, _ := m.Where(k)
		if d.Lease == nil || slices.Contains(covered, d) {
			continue
		}
		covered = append(covered, d)
		p, ok, err := coverPinned(ctx, d.Lease, end, ttl, !onLoop)
		if err != nil {
			return false, err
		} else if !ok {
			return false, ErrWouldBlock // a heartbeat push first
		}
		defer p.unpin() // until the expirer has the new deadlines, below
	}
	ok, hs := m.changeHands(keys, from, to, ttl, end)
	for _, h := range hs {
		m.exp.add(h, end)
	}
	return ok, nil
}

// changeHands checks, under the shard locks of every key at once, that each
// key's hold can change hands in place (Reassign); with a zero end it only
// checks, otherwise it hands them over and returns the holds, whose new
// deadline the caller schedules.
func (m *Map) changeHands(keys, from []string, to string, ttl time.Duration, end time.Time) (bool, []*hold) {
	// Shards are locked in index order, so that two calls over the same
	// shards cannot deadlock.
	idx := make([]int, 0, len(keys))
	for _, k := range keys {
		idx = append(idx, m.shardIndex(k))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		m.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range idx {
			m.shards[i].mu.Unlock()
		}
	}()
	hs := make([]*hold, len(keys))
	reaped := false
	defer func() { m.reaped(reaped) }()
	for i, k := range keys {
		held, r := m.shards[m.shardIndex(k)].current(k)
		reaped = reaped || r
		if len(held) != 1 || held[0].token != from[i] || !m.ownsOutright(k, held[0]) {
			return false, nil
		}
		hs[i] = held[0]
	}
	if end.IsZero() {
		return true, nil
	}
	for i, h := range hs {
		if h.token == to && h.deadline.Equal(end) {
			continue // listed twice
		}
		h.token, h.deadline, h.ttl = to, end, ttl
		// Owner recognition must know the owner by its new token: a
		// request under the old one, through another proxy, is no
		// longer this holder's (a single-key grant carries the tag).
		if sg, ok := h.g.g.(*shiftlock.Guard); ok {
			sg.Retag(tagFor(h.dom, keys[i], to))
		}
	}
	return true, hs
}

// ownsOutright reports whether h, key's hold, holds its lock itself and
// alone, under the current membership (Reassign).
func (m *Map) ownsOutright(key string, h *hold) bool {
	if h.dead || h.mode != shiftlock.Exclusive || h.g == nil || h.g.pending() || h.g.remote() || h.g.home != nil {
		return false
	}
	d, _ := m.Where(key)
	return h.dom == d
}

// Persist removes key's TTL (Redis PERSIST).
func (m *Map) Persist(key string) bool {
	s := m.shard(key)
	s.mu.Lock()
	var cleared []*hold
	cur, reaped := s.current(key)
	for _, h := range cur {
		// A routed share keeps its TTL: its home would let the lock go
		// at the TTL anyway, and a share without one would keep it held
		// for good should this proxy die.
		if !h.deadline.IsZero() && h.fwd() == nil {
			h.deadline, h.ttl = time.Time{}, 0
			cleared = append(cleared, h)
		}
	}
	s.mu.Unlock()
	m.reaped(reaped)
	for _, h := range cleared {
		m.exp.remove(h)
	}
	return len(cleared) > 0
}
