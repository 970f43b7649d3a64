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

// TestRedsyncRetryWaitsItsTurn: redsync bounds each try by 5% of the
// expiry, longer than the proxy's budget (4% of the TTL), so once a
// connection has run redsync's scripts, its tries wait the whole budget
// and are handed the lock, instead of being refused and sleeping. Before
// (2026-11-28), the first try on a connection that had not retried was
// refused at once and the retry's wait was capped at its gap, here 20 ms:
// both refused before the holder let go at 150 ms.
func TestRedsyncRetryWaitsItsTurn(t *testing.T) {
	p := testproc.Proxy(t)
	ctx := ctxT(t, time.Minute)
	newRS := func() *redsync.Redsync {
		rc := redis.NewClient(&redis.Options{Addr: p.Addr, PoolSize: 1})
		t.Cleanup(func() { rc.Close() })
		return redsync.New(goredis.NewPool(rc))
	}
	app, other := newRS(), newRS()

	// The app has locked and unlocked before on its one connection.
	warm := app.NewMutex("warm")
	if err := warm.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := warm.UnlockContext(ctx); !ok || err != nil {
		t.Fatalf("unlock: %v %v", ok, err)
	}

	holder := other.NewMutex("hot", redsync.WithExpiry(10*time.Second))
	if err := holder.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() {
		time.Sleep(150 * time.Millisecond)
		_, err := holder.UnlockContext(ctx)
		released <- err
	}()
	m := app.NewMutex("hot", redsync.WithExpiry(10*time.Second), redsync.WithTries(2), redsync.WithRetryDelay(20*time.Millisecond))
	if err := m.LockContext(ctx); err != nil {
		t.Fatalf("two tries 20 ms apart, the holder letting go at 150 ms: %v, want the lock (a try waits up to 4%% of the TTL, 400 ms)", err)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if ok, err := m.UnlockContext(ctx); !ok || err != nil {
		t.Fatalf("unlock: %v %v", ok, err)
	}
}
