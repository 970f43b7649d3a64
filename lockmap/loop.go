package lockmap

import (
	"context"
	"errors"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rangelock"
	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// ErrWouldBlock is a Loop's answer where an operation would otherwise wait:
// a held key with a wait budget, a lock entry still being passed on by an
// abandoned wait, or any verb on a memory node that is not in-process. The
// operation has left no hold behind; the caller runs it again on the Map,
// where blocking is allowed.
var ErrWouldBlock = errors.New("lockmap: operation would block")

// Loop is a Map as a caller that must never block uses it, such as a
// server's event loop: each operation either completes without waiting or
// answers ErrWouldBlock. Only an Inline map completes anything this way. The
// mode is the receiver's type, not a property of the context: a Loop's
// contexts, like the Map's, carry cancellation only.
//
// A Loop is cheap, and one per event loop is the intended use. Its methods
// are safe for concurrent use, as the Map's are.
type Loop struct {
	m    *Map
	bell *Doorbell
}

// Loop returns the map as an event loop uses it. bell, if not nil, is the
// loop's doorbell: a release that Extend or ExtendAny makes (a TTL of 0)
// posts its atomic there instead of waiting for it.
func (m *Map) Loop(bell *Doorbell) *Loop { return &Loop{m: m, bell: bell} }

// Acquire is Map.Acquire that never blocks: a key it would have to wait
// for answers ErrWouldBlock, with nothing held.
func (l *Loop) Acquire(ctx context.Context, keys []string, token string, opt AcquireOptions) (fences []uint64, ok bool, err error) {
	return l.m.acquireAll(ctx, keys, token, opt, true)
}

// AcquireKey is Map.AcquireKey that never blocks (see Acquire). An
// exclusive acquire on an Inline map that would queue can instead queue
// from here and be waited for elsewhere: AcquireOrQueue.
func (l *Loop) AcquireKey(ctx context.Context, key, token string, opt AcquireOptions) (fence uint64, ok bool, err error) {
	return l.m.acquireKey(ctx, key, token, opt, true)
}

// Extend is Map.Extend that never blocks.
func (l *Loop) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	return l.m.extend(ctx, l, key, token, false, ttl)
}

// ExtendAny is Map.ExtendAny that never blocks.
func (l *Loop) ExtendAny(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	return l.m.extend(ctx, l, key, "", true, ttl)
}

// Reassign is Map.Reassign that never blocks.
func (l *Loop) Reassign(ctx context.Context, keys, from []string, to string, ttl time.Duration) (bool, error) {
	return l.m.reassign(ctx, true, keys, from, to, ttl)
}

// Lookup is Map.Lookup that never blocks.
func (l *Loop) Lookup(ctx context.Context, key string) (Info, error) {
	return l.m.lookup(ctx, true, key)
}

// RangeAcquire always answers ErrWouldBlock: a range lock's tree is walked
// with verbs that wait for one another.
func (l *Loop) RangeAcquire(ctx context.Context, key, token string, lo, hi uint64, mode rangelock.Mode, ttl, wait time.Duration) (fence uint64, ok bool, err error) {
	return 0, false, ErrWouldBlock
}

// Inline reports whether every memory node of the map is in-process
// (rdma.Inliner), so that its operations can run on an event loop (Loop).
// An embedded proxy's map is; a map joined to memnode processes is not,
// since each of its verbs waits for a network round trip.
func (m *Map) Inline() bool { return m.inline.Load() }

// inlineNow computes Inline, which every acquire on a loop asks: New and
// Replace store it.
func (m *Map) inlineNow() bool {
	for i := range m.doms {
		if !rdma.IsInline(m.doms[i].Load().Client.Endpoint()) {
			return false
		}
	}
	return true
}
