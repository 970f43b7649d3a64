package bank

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Mode is how a lock is wanted.
type Mode uint8

const (
	Shared Mode = iota + 1
	Exclusive
)

// LockReq asks for one lock.
type LockReq struct {
	Key  string
	Mode Mode
}

// Locker takes a transaction's locks all at once and gives them back all at
// once. Implementations are safe for concurrent use by many clients.
type Locker interface {
	// Name is the locker's name in results ("redlock", "proxy", ...).
	Name() string
	// Acquire takes every lock in reqs, which come in the global order
	// (ascending account). It either holds them all or, having released
	// whatever it took, returns an error: ErrNotAcquired when a lock could
	// not be had in the locker's time, anything else for a failure.
	Acquire(ctx context.Context, reqs []LockReq) (Held, error)
	Close() error
}

// Held is a set of locks held by one transaction.
type Held interface {
	// Release gives every lock back. An error means some lock was no longer
	// held (it expired), which breaks the transaction's isolation.
	Release(ctx context.Context) error
}

// ErrNotAcquired: a lock was not obtained within the locker's own bounds
// (redsync's retries, a wait deadline). The transaction aborts.
var ErrNotAcquired = errors.New("bank: lock not acquired")

// LockReqs are t's locks in the global order: shared for a read-only
// transaction, exclusive otherwise.
func (t Txn) LockReqs() []LockReq {
	mode := Exclusive
	if t.Type.ReadOnly() {
		mode = Shared
	}
	if t.Type.Accounts() == 1 {
		return []LockReq{{LockKey(t.A), mode}}
	}
	a, b := t.A, t.B
	if b < a {
		a, b = b, a
	}
	return []LockReq{{LockKey(a), mode}, {LockKey(b), mode}}
}

// LockerConfig names a locker and where its servers are.
type LockerConfig struct {
	Name       string   // redlock, redlock-rs, proxy, native or none
	LockRedis  []string // redlock, redlock-rs: redis-servers
	Proxies    []string // proxy: shiftlock-proxies
	Memnodes   []string // native: memory nodes, in the proxies' order
	NativeWait time.Duration
	// TTL is each lock's TTL for redlock-rs (0: its 10 ms) and for the
	// fenced proxy locker (0: 8 s, redsync's default).
	TTL time.Duration
	// Fence asks for a locker with fencing tokens: for proxy, the
	// LOCK.ACQUIRE locker (redsync cannot see tokens) on the first proxy,
	// waiting up to NativeWait; native has them anyway.
	Fence bool
	// PoolSize is the connections per lock server (redlock, proxy).
	PoolSize int
}

// OpenLocker connects the locker cfg names and checks its servers answer.
// It returns the number of lock servers behind it.
func OpenLocker(ctx context.Context, cfg LockerConfig) (Locker, int, error) {
	switch {
	case cfg.Name == "proxy" && cfg.Fence:
		if len(cfg.Proxies) != 1 {
			return nil, 0, fmt.Errorf("bank: fenced proxy locker takes one proxy, got %d", len(cfg.Proxies))
		}
		ttl := cfg.TTL
		if ttl == 0 {
			ttl = 8 * time.Second
		}
		l, err := NewLockCmdLocker(cfg.Proxies[0], ttl, cfg.NativeWait, cfg.PoolSize)
		if err != nil {
			return nil, 0, err
		}
		if err := l.Ping(ctx); err != nil {
			_ = l.Close()
			return nil, 0, err
		}
		return l, 1, nil
	case cfg.Fence && cfg.Name != "native":
		return nil, 0, fmt.Errorf("bank: the %s locker has no fencing tokens (proxy and native have)", cfg.Name)
	}
	switch cfg.Name {
	case "redlock-rs":
		l, err := NewRedlockRSLocker(cfg.LockRedis, cfg.TTL)
		if err != nil {
			return nil, 0, err
		}
		if err := l.Ping(ctx); err != nil {
			return nil, 0, err
		}
		return l, len(cfg.LockRedis), nil
	case "redlock", "proxy":
		addrs := cfg.LockRedis
		if cfg.Name == "proxy" {
			addrs = cfg.Proxies
		}
		l, err := NewRedsyncLocker(cfg.Name, addrs, cfg.PoolSize)
		if err != nil {
			return nil, 0, err
		}
		if err := l.Ping(ctx); err != nil {
			_ = l.Close()
			return nil, 0, err
		}
		return l, len(addrs), nil
	case "native":
		l, err := NewNativeLocker(ctx, cfg.Memnodes, cfg.NativeWait)
		if err != nil {
			return nil, 0, err
		}
		return l, len(cfg.Memnodes), nil
	case "none":
		return NoLocker{}, 0, nil
	}
	return nil, 0, fmt.Errorf("bank: unknown locker %q (want redlock, redlock-rs, proxy, native or none)", cfg.Name)
}

// releaseEach calls release(i) for every lock of a transaction at once:
// the shrinking phase of 2PL may go in any order, and releasing one lock
// after another would keep the first one held for an extra round trip,
// which under contention is time its next holder waits.
func releaseEach(n int, release func(i int) error) error {
	if n == 1 {
		return release(0)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = release(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
