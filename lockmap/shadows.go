package lockmap

import (
	"context"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// MinOwnerToken is the shortest token owner recognition accepts: RedLock
// clients use random values of 16 bytes or more (redsync 24 characters,
// node-redlock 32, RedLock.net and redlock-rb 36), while a constant such
// as "1" or "locked" is what two unrelated applications may both use.
const MinOwnerToken = 16

// tagFor is the owner tag of an exclusive single-key acquire of key by
// token through d, or 0 when the holder must not be recognised through
// other proxies: recognition is off, or the token is too short to tell
// one client from another.
func tagFor(d *Domain, key, token string) uint64 {
	if !d.Client.OwnerTags() || len(token) < MinOwnerToken {
		return 0
	}
	return ownerTag(key, token)
}

// ownerTag identifies a key and token for owner recognition: a hash of
// both, never 0 (which means "no tag").
func ownerTag(key, token string) uint64 {
	h := xxhash.New()
	_, _ = h.WriteString(key)
	_, _ = h.Write([]byte{0})
	_, _ = h.WriteString(token)
	if t := h.Sum64(); t != 0 {
		return t
	}
	return 1
}

// tagGrace bounds how long a try-only acquire waits for the queue's answer
// about its owner tag (shiftlock.Client.QueryOwner). The answer is a
// message round trip between proxies, or, when the same client's request
// through another proxy was granted a moment ago and not yet answered, that
// answer's time; a queue without the tag answers no at once. Every
// question is answered, so the bound only matters for a proxy that died
// holding one: a shorter one made the answer a race that a loaded host
// lost (issue 33 item 3: SET NX PX through 8 proxies refused after 8-18 ms
// with a 2 ms grace, although the same client held the key).
var tagGrace = shiftlock.OwnerAnswerCap // a variable for tests only

// awaitOthersGone waits until no key has a hold of another token here, or
// until deadline. Such holds are shadows whose client is letting go; the
// wait ends as soon as one goes (the shard's removals signal it), so that a
// RedLock client's request is queued right after its requests to the other
// proxies, where they recognise each other.
func (m *Map) awaitOthersGone(ctx context.Context, keys []string, token string, deadline time.Time) bool {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		var wake <-chan struct{}
		for _, k := range keys {
			if ch := m.otherHoldSignal(k, token); ch != nil {
				wake = ch
				break
			}
		}
		if wake == nil {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return false
		}
		if t == nil {
			t = time.NewTimer(left)
		}
		select {
		case <-wake:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// otherHoldSignal returns, if key has a hold of another token here, a
// channel that is closed when a hold of key's shard goes; nil otherwise.
func (m *Map) otherHoldSignal(key, token string) <-chan struct{} {
	s := m.shard(key)
	s.mu.Lock()
	hs, reaped := s.current(key)
	var ch chan struct{}
	for _, h := range hs {
		if h.token != token {
			if s.gone == nil {
				s.gone = make(chan struct{})
			}
			ch = s.gone
			break
		}
	}
	s.mu.Unlock()
	m.reaped(reaped)
	return ch
}
