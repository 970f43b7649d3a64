// Package scripttest is an in-memory lock table that implements scripts.Ops,
// with a manual clock, so that a test can run the script executors with
// exact TTLs and expiry only when it advances time: the unit tests of
// package scripts, and the replays of real clients' traffic in itest.
package scripttest

import (
	"fmt"
	"maps"
	"sync"
	"time"
)

// Table is the in-memory lock table. The zero value is not usable; call New.
type Table struct {
	mu    sync.Mutex
	now   time.Time
	locks map[string]Lock
	err   error // when set, every mutating call fails with it
	// pinned keys' holds cannot change hands in place (a shadow or a
	// routed share in the real lock table): Reassign refuses them.
	pinned map[string]bool
}

// Lock is one held key.
type Lock struct {
	Token   string
	Expires time.Time // zero: no TTL
}

// New is an empty table whose clock starts at a fixed instant.
func New() *Table {
	return &Table{now: time.Unix(1_700_000_000, 0), locks: map[string]Lock{}, pinned: map[string]bool{}}
}

func (f *Table) live(key string) (Lock, bool) {
	l, ok := f.locks[key]
	if ok && !l.Expires.IsZero() && !f.now.Before(l.Expires) {
		delete(f.locks, key)
		return Lock{}, false
	}
	return l, ok
}

func (f *Table) deadline(ttl time.Duration) time.Time {
	if ttl <= 0 {
		return time.Time{}
	}
	return f.now.Add(ttl)
}

// Get implements scripts.Ops.
func (f *Table) Get(key string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.live(key)
	return l.Token, ok
}

// Acquire implements scripts.Ops.
func (f *Table) Acquire(keys []string, token string, ttl time.Duration, reentrant bool) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return false, f.err
	}
	for _, k := range keys {
		if l, ok := f.live(k); ok && !(reentrant && l.Token == token) {
			return false, nil
		}
	}
	for _, k := range keys {
		f.locks[k] = Lock{token, f.deadline(ttl)}
	}
	return true, nil
}

// Release implements scripts.Ops.
func (f *Table) Release(key, token string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return false, f.err
	}
	if l, ok := f.live(key); ok && l.Token == token {
		delete(f.locks, key)
		return true, nil
	}
	return false, nil
}

// Extend implements scripts.Ops; a TTL that is not positive is an error, as
// the lock table's is (the executors must delete instead).
func (f *Table) Extend(key, token string, ttl time.Duration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.refuse("Extend", ttl); err != nil {
		return false, err
	}
	if l, ok := f.live(key); ok && l.Token == token {
		f.locks[key] = Lock{token, f.deadline(ttl)}
		return true, nil
	}
	return false, nil
}

// refuse is what a call that sets a TTL answers before it looks at a lock:
// the injected error, or a TTL that is not positive, which the real lock
// table refuses too (an executor must delete instead).
func (f *Table) refuse(call string, ttl time.Duration) error {
	if f.err != nil {
		return f.err
	}
	if ttl <= 0 {
		return fmt.Errorf("scripttest: %s with non-positive TTL", call)
	}
	return nil
}

// Reassign implements scripts.Ops.
func (f *Table) Reassign(keys, from []string, token string, ttl time.Duration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.refuse("Reassign", ttl); err != nil {
		return false, err
	}
	for i, k := range keys {
		if l, ok := f.live(k); !ok || l.Token != from[i] || f.pinned[k] {
			return false, nil
		}
	}
	for _, k := range keys {
		f.locks[k] = Lock{token, f.deadline(ttl)}
	}
	return true, nil
}

// PTTL implements scripts.Ops.
func (f *Table) PTTL(key string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.live(key)
	switch {
	case !ok:
		return -2, nil
	case l.Expires.IsZero():
		return -1, nil
	}
	return l.Expires.Sub(f.now).Milliseconds(), nil
}

// Set puts a lock in place directly; ttl 0 means no TTL.
func (f *Table) Set(key, token string, ttl time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.locks[key] = Lock{token, f.deadline(ttl)}
}

// Advance moves the clock; locks whose TTL runs out by then are gone.
func (f *Table) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// FailWith makes every later mutating call fail with err (nil: succeed
// again), as a lock table that lost its memory node does.
func (f *Table) FailWith(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// Pin makes the holds of keys, and only those, unable to change hands in
// place, as a shadow's or a routed share's is in the real lock table:
// Reassign refuses them. Pin() unpins all.
func (f *Table) Pin(keys ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.pinned)
	for _, k := range keys {
		f.pinned[k] = true
	}
}

// Snapshot returns the clock and the live locks.
func (f *Table) Snapshot() (time.Time, map[string]Lock) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := maps.Clone(f.locks)
	for k, l := range out {
		if !l.Expires.IsZero() && !f.now.Before(l.Expires) {
			delete(out, k)
		}
	}
	return f.now, out
}
