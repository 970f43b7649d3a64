package itest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestTryOnceClientsAnsweredAtOnce: a client that tries once, as
// bsm/redislock does by default, gets Redis's answer at once from the
// proxy's default wait policy, and one with a short retry strategy is not
// granted a lock later than it would have given up. Before, every refused
// acquire waited in the lock's queue for its budget: 100 goroutines trying
// one key with a one-minute TTL held go-redis's pool of 20 connections for
// 2 s each ("redis: connection pool timeout", redislock's own
// TestObtain_concurrent), and a try that Redis refuses at once was granted
// 50 ms later (TestObtain_retry_failure).
func TestTryOnceClientsAnsweredAtOnce(t *testing.T) {
	eachFrontend(t, func(t *testing.T, fe string) {
		p := testproc.Proxy(t, "-frontend", fe)
		rc := redis.NewClient(&redis.Options{Addr: p.Addr, PoolSize: 20, PoolTimeout: 4 * time.Second})
		t.Cleanup(func() { rc.Close() })
		ctx := ctxT(t, time.Minute)

		var obtained atomic.Int32
		err := inParallel(100, func(i int) error {
			time.Sleep(time.Duration(i%10) * time.Millisecond)
			_, err := redislock.Obtain(ctx, rc, "concurrent", time.Minute, nil)
			switch {
			case err == nil:
				obtained.Add(1)
			case !errors.Is(err, redislock.ErrNotObtained):
				return err
			}
			return nil
		})
		if err != nil {
			t.Fatalf("a try-once Obtain failed: %v", err)
		}
		if n := obtained.Load(); n != 1 {
			t.Fatalf("%d of 100 concurrent Obtains succeeded, want 1", n)
		}

		lock1, err := redislock.Obtain(ctx, rc, "retry", 50*time.Millisecond, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer lock1.Release(ctx)
		_, err = redislock.Obtain(ctx, rc, "retry", time.Hour, &redislock.Options{
			RetryStrategy: redislock.LimitRetry(redislock.LinearBackoff(5*time.Millisecond), 2),
		})
		if !errors.Is(err, redislock.ErrNotObtained) {
			t.Fatalf("two 5 ms retries on a lock held for 50 ms: %v, want ErrNotObtained (the client gives up before it is free)", err)
		}
	})
}

// TestRetryingClientsHandedTheLock: redsync retries a refused lock with the
// value it tried with; the proxy lets the retry wait, no longer than
// redsync slept before it, and hands it the lock when the holder lets go.
// Eight mutexes on one key, each held 20 ms, all get their turn within
// redsync's default tries, and each one's critical section is its own.
func TestRetryingClientsHandedTheLock(t *testing.T) {
	p := testproc.Proxy(t)
	rs := redsync.New(goredis.NewPool(redis.NewClient(&redis.Options{Addr: p.Addr, PoolSize: 16})))
	ctx := ctxT(t, time.Minute)
	var inside, maxInside atomic.Int32
	err := inParallel(8, func(w int) error {
		for r := 0; r < 4; r++ {
			m := rs.NewMutex("hot", redsync.WithExpiry(2*time.Second))
			if err := m.LockContext(ctx); err != nil {
				return fmt.Errorf("worker %d round %d: %w", w, r, err)
			}
			if n := inside.Add(1); n > maxInside.Load() {
				maxInside.Store(n)
			}
			time.Sleep(20 * time.Millisecond)
			inside.Add(-1)
			if ok, err := m.UnlockContext(context.Background()); !ok || err != nil {
				return fmt.Errorf("unlock: %v %v", ok, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if maxInside.Load() != 1 {
		t.Fatalf("%d redsync clients inside at once", maxInside.Load())
	}
}
