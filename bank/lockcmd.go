package bank

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// LockCmdLocker takes its locks with the proxy's own LOCK.ACQUIRE, which,
// unlike SET NX, answers with a fencing token: the locker for fenced runs
// (RunConfig.Fence). Read-only transactions take shared locks. Each lock
// has the locker's TTL (PX) and waits at most its wait (WAIT) in the
// proxy's queue, where a waiter is handed the lock.
type LockCmdLocker struct {
	c         *redis.Client
	ttl, wait time.Duration
}

// NewLockCmdLocker connects to the proxy at addr.
func NewLockCmdLocker(addr string, ttl, wait time.Duration, poolSize int) (*LockCmdLocker, error) {
	if ttl < time.Millisecond || wait < 0 {
		return nil, fmt.Errorf("bank: proxy-fenced locker: TTL %v (want >= 1ms), wait %v", ttl, wait)
	}
	return &LockCmdLocker{c: redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize}), ttl: ttl, wait: wait}, nil
}

func (l *LockCmdLocker) Name() string { return "proxy-fenced" }

// Ping checks the proxy answers LOCK.* commands.
func (l *LockCmdLocker) Ping(ctx context.Context) error {
	if err := l.c.Do(ctx, "LOCK.INFO", "bank:ping").Err(); err != nil {
		return fmt.Errorf("bank: proxy-fenced locker: %w", err)
	}
	return nil
}

type lockCmdLock struct {
	key, token string
	fence      uint64
}

type lockCmdHeld struct {
	c     *redis.Client
	ttl   time.Duration
	locks []lockCmdLock
}

func (l *LockCmdLocker) Acquire(ctx context.Context, reqs []LockReq) (Held, error) {
	h := &lockCmdHeld{c: l.c, ttl: l.ttl, locks: make([]lockCmdLock, 0, len(reqs))}
	for _, r := range reqs {
		var id [16]byte
		_, _ = rand.Read(id[:])
		tok := hex.EncodeToString(id[:])
		args := []any{"LOCK.ACQUIRE", r.Key, tok}
		if r.Mode == Shared {
			args = append(args, "SHARED")
		}
		args = append(args, "PX", l.ttl.Milliseconds(), "WAIT", l.wait.Milliseconds())
		fence, err := l.c.Do(ctx, args...).Uint64()
		if err != nil {
			_ = h.Release(context.WithoutCancel(ctx))
			if errors.Is(err, redis.Nil) {
				return nil, fmt.Errorf("%w: %s still held after %v", ErrNotAcquired, r.Key, l.wait)
			}
			return nil, fmt.Errorf("bank: LOCK.ACQUIRE %s: %w", r.Key, err)
		}
		h.locks = append(h.locks, lockCmdLock{r.Key, tok, fence})
	}
	return h, nil
}

func (h *lockCmdHeld) Fence(key string) (uint64, bool) {
	for _, lk := range h.locks {
		if lk.key == key {
			return lk.fence, true
		}
	}
	return 0, false
}

// Release answers an error if a lock was no longer held: its TTL ran out.
func (h *lockCmdHeld) Release(ctx context.Context) error {
	return releaseEach(len(h.locks), func(i int) error {
		lk := h.locks[i]
		n, err := h.c.Do(ctx, "LOCK.RELEASE", lk.key, lk.token).Int()
		if err == nil && n != 1 {
			err = fmt.Errorf("bank: release %s: not held (TTL %v ran out)", lk.key, h.ttl)
		}
		return err
	})
}

func (l *LockCmdLocker) Close() error { return l.c.Close() }
