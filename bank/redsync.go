package bank

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// RedsyncLocker is RedLock as go-redsync/redsync v4 ships it: one Mutex per
// lock key, with redsync's defaults (8 s expiry, 32 tries 50-250 ms apart,
// each try bounded by 5% of the expiry, quorum of a majority), acquired one
// after another in the global order. RedLock has no shared mode, so reads
// take the same exclusive locks.
//
// The same code serves two lockers: "redlock", with the pools on
// redis-server instances, and "proxy", with the pools on shiftlock-proxy
// instances. Nothing else changes: that is the drop-in claim.
type RedsyncLocker struct {
	name    string
	rs      *redsync.Redsync
	clients []*redis.Client
}

// NewRedsyncLocker connects one pool per address. poolSize should cover
// every client that may hold a connection at once (a queued SET NX holds
// one on the proxy), so that no client waits for a connection instead of a
// lock.
func NewRedsyncLocker(name string, addrs []string, poolSize int) (*RedsyncLocker, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("bank: %s locker needs at least one address", name)
	}
	l := &RedsyncLocker{name: name}
	var pools []redsyncredis.Pool
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, PoolSize: poolSize})
		l.clients = append(l.clients, c)
		pools = append(pools, goredis.NewPool(c))
	}
	l.rs = redsync.New(pools...)
	return l, nil
}

// Ping checks that every lock server answers.
func (l *RedsyncLocker) Ping(ctx context.Context) error {
	for _, c := range l.clients {
		if err := c.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("bank: %s locker: %w", l.name, err)
		}
	}
	return nil
}

func (l *RedsyncLocker) Name() string { return l.name }

type redsyncHeld []*redsync.Mutex

func (l *RedsyncLocker) Acquire(ctx context.Context, reqs []LockReq) (Held, error) {
	held := make(redsyncHeld, 0, len(reqs))
	for _, r := range reqs {
		m := l.rs.NewMutex(r.Key)
		if err := m.LockContext(ctx); err != nil {
			_ = held.Release(context.WithoutCancel(ctx))
			return nil, lockErr(err)
		}
		held = append(held, m)
	}
	return held, nil
}

// lockErr tells "redsync gave up on a taken lock" from real failures.
func lockErr(err error) error {
	var taken *redsync.ErrTaken
	var nodeTaken *redsync.ErrNodeTaken
	if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) || errors.As(err, &nodeTaken) {
		return fmt.Errorf("%w: %v", ErrNotAcquired, err)
	}
	return err
}

func (h redsyncHeld) Release(ctx context.Context) error {
	return releaseEach(len(h), func(i int) error {
		ok, err := h[i].UnlockContext(ctx)
		if err == nil && !ok {
			err = fmt.Errorf("bank: unlock %s: not held", h[i].Name())
		}
		return err
	})
}

func (l *RedsyncLocker) Close() error {
	var errs []error
	for _, c := range l.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
