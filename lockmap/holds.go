package lockmap

import (
	"time"

	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// hold is one key held by one token.
type hold struct {
	key      string
	token    string
	dom      *Domain // the membership the hold was made under
	mode     shiftlock.Mode
	fence    uint64
	deadline time.Time // zero: no TTL
	ttl      time.Duration
	since    time.Time // when it was granted
	g        *grant    // nil for a pure shadow
	dead     bool      // released or expired; the expirer skips it
	// reaped: unlinked by a command that found its TTL over before the
	// expirer did; the expirer, which still has it scheduled, releases its
	// grant (guarded by the shard's lock).
	reaped bool
	expAt  time.Time
	expIdx int // index in the expirer's heap, -1 if not there (guarded by the expirer)
	// self backs the shard's slice for a key whose only hold this is,
	// the common case, so that recording a hold allocates no slice.
	self [1]*hold
}

// live reports whether h is in force at now. A hold with a TTL ends at the
// instant of its deadline for every command, as a Redis key does, whether or
// not the expirer has got to it yet: on a loaded process timers run late, and
// a lock that could still be extended or released after its deadline could
// be extended after another client was told it was free.
func (h *hold) live(now time.Time) bool { return h.deadline.IsZero() || now.Before(h.deadline) }

// current returns key's holds in force and unlinks those whose TTL has run
// out; s.mu is held. An unlinked hold's grant stays taken until the expirer,
// which still has the hold scheduled, releases it: if reaped is true, poke
// the expirer once the lock is dropped. The clock is read only if some hold
// has a TTL, and then the monotonic clock alone (time.Until, half the cost
// of time.Now on every release) until one is found expired.
func (s *shard) current(key string) (hs []*hold, reaped bool) {
	hs = s.keys[key]
	if len(hs) == 1 {
		h := hs[0]
		reaped = !h.deadline.IsZero() && time.Until(h.deadline) <= 0 // the monotonic clock alone
	} else if len(hs) > 1 {
		now := time.Now() // once, not once per holder
		for _, h := range hs {
			if !h.deadline.IsZero() && !now.Before(h.deadline) {
				reaped = true
				break
			}
		}
	}
	if !reaped {
		return hs, false
	}
	now := time.Now()
	kept := hs[:0]
	for _, h := range hs {
		if h.live(now) {
			kept = append(kept, h)
			continue
		}
		h.dead, h.reaped = true, true
	}
	clear(hs[len(kept):])
	if len(kept) == 0 {
		delete(s.keys, key)
	} else {
		s.keys[key] = kept
	}
	if s.gone != nil {
		close(s.gone)
		s.gone = nil
	}
	return kept, true
}

// A shadow is a hold whose lock is held by its owner through another proxy
// (owner recognition, shiftlock/owner.go): a RedLock client asked every
// proxy for the same key and token, and this one answers as an independent
// Redis instance would. It ends with its TTL or a release. A pure shadow
// (from a try-only request) has no place in the queue at all; a pending
// one keeps the place its request took, which the lock reaches once the
// owner's other holds let go.
func (h *hold) shadow() bool { return h.g == nil || h.g.pending() }

// fwd is the hold's share of a lock its home proxy holds, if it is one.
func (h *hold) fwd() *fwdGrant {
	if h.g == nil {
		return nil
	}
	fg, _ := h.g.g.(*fwdGrant)
	return fg
}

// holdsOf returns token's hold of key, if any, and whether another token
// holds key here too: one visit to the shard for what every acquire asks.
func (m *Map) holdsOf(key, token string) (mine *hold, others, full bool) {
	s := m.shard(key)
	s.mu.Lock()
	hs, reaped := s.current(key)
	for _, h := range hs {
		if h.token == token {
			mine = h
		} else {
			others = true
		}
	}
	full = len(hs) >= MaxHoldersPerKey
	s.mu.Unlock()
	m.reaped(reaped)
	return mine, others, full
}

// MaxHoldersPerKey is how many holds of one key this proxy keeps at once:
// shared holders, since a key has one exclusive holder. Every command on
// the key looks at each of them, on the event loop that serves many
// clients; one client pipelining shared acquires of one key held every
// other client of the proxy up (56,000 holders: 4 ms per command on that
// key, unrelated SET NX at p99 3 s). At 4096 a GET of the key still took
// 0.46 ms (Lookup lists every holder); at 1024 about a quarter of that.
const MaxHoldersPerKey = 1024

// setDeadline gives h a new deadline (zero: none), if h is still in force
// now: a hold whose TTL ran out while the caller was deciding stays gone.
func (m *Map) setDeadline(h *hold, end time.Time, ttl time.Duration) bool {
	s := m.shard(h.key)
	s.mu.Lock()
	_, reaped := s.current(h.key)
	if h.dead {
		s.mu.Unlock()
		m.reaped(reaped)
		return false
	}
	h.deadline, h.ttl = end, ttl
	s.mu.Unlock()
	m.reaped(reaped)
	if !end.IsZero() {
		m.exp.add(h, end)
	}
	return true
}

// reaped wakes the expirer to release the grants of holds that a command
// found past their TTL (shard.current), if it found any.
func (m *Map) reaped(any bool) {
	if any {
		m.exp.poke()
	}
}

// remove unlinks holds of key that match and appends them to out; the
// caller releases their grants outside the shard lock. Holds past their TTL
// never match: they are gone already, and the expirer releases them.
func (m *Map) remove(key string, match func(*hold) bool, out []*hold) []*hold {
	s := m.shard(key)
	s.mu.Lock()
	n := len(out)
	hs, reaped := s.current(key)
	kept := hs[:0]
	for _, h := range hs {
		if match(h) {
			h.dead = true
			out = append(out, h)
		} else {
			kept = append(kept, h)
		}
	}
	clear(hs[len(kept):])
	if len(kept) == 0 {
		delete(s.keys, key)
	} else {
		s.keys[key] = kept
	}
	if s.gone != nil && len(out) > n {
		close(s.gone)
		s.gone = nil
	}
	s.mu.Unlock()
	m.reaped(reaped)
	for _, h := range out[n:] {
		m.exp.remove(h)
	}
	return out
}

func (m *Map) releaseHolds(hs []*hold) {
	for _, h := range hs {
		if h.g != nil { // a pending grant too: its place in the queue must be passed on
			m.releaseGrant(h.g)
		}
	}
}

// Release releases key if token holds it, and reports whether it did.
func (m *Map) Release(key, token string) bool {
	var buf [1]*hold
	hs := m.remove(key, func(h *hold) bool { return h.token == token }, buf[:0])
	m.releaseHolds(hs)
	m.ended(hs, false)
	return len(hs) > 0
}

// Delete releases key whoever holds it through this proxy (Redis DEL). It
// reports how many holds it released.
func (m *Map) Delete(key string) int {
	hs := m.remove(key, func(*hold) bool { return true }, nil)
	m.releaseHolds(hs)
	m.ended(hs, false)
	return len(hs)
}

// expire is the expirer's callback: release h if its deadline still stands,
// whether h is still in the table or a command found it expired first and
// unlinked it (shard.current).
func (m *Map) expire(h *hold, _ time.Time) {
	s := m.shard(h.key)
	s.mu.Lock()
	s.current(h.key) // unlinks h if its deadline (at, unless it moved) has passed
	mine := h.reaped
	h.reaped = false
	s.mu.Unlock()
	if !mine {
		return
	}
	// A hold of a membership that is gone (Replace) has nothing to release.
	if h.g != nil && h.g.dom == m.doms[h.g.di].Load() {
		m.releaseGrant(h.g)
	}
	m.ended([]*hold{h}, true)
	if m.cfg.OnExpire != nil {
		m.cfg.OnExpire(h.key)
	}
}

// ended reports holds that just ended to OnHoldEnd.
func (m *Map) ended(hs []*hold, expired bool) {
	if m.cfg.OnHoldEnd == nil || len(hs) == 0 {
		return
	}
	for _, h := range hs {
		m.cfg.OnHoldEnd(h.mode, time.Since(h.since), expired) // the monotonic clock alone
	}
}
