package itest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

func pools(t *testing.T, addrs ...string) []redis.Pool {
	var ps []redis.Pool
	for _, a := range addrs {
		ps = append(ps, goredis.NewPool(client(t, a)))
	}
	return ps
}

// TestRedsyncSinglePool drives redsync v4 with its defaults against one
// embedded proxy: acquire, contention, extend, expiry, release.
func TestRedsyncSinglePool(t *testing.T) {
	p := testproc.Proxy(t)
	rs := redsync.New(pools(t, p.Addr)...)
	ctx := ctxT(t, time.Minute)

	m1 := rs.NewMutex("res", redsync.WithExpiry(2*time.Second))
	if err := m1.LockContext(ctx); err != nil {
		t.Fatalf("lock: %v", err)
	}
	other := rs.NewMutex("res", redsync.WithTries(1))
	err := other.LockContext(ctx)
	var taken *redsync.ErrTaken
	if !errors.As(err, &taken) && !errors.Is(err, redsync.ErrFailed) {
		t.Fatalf("second mutex on a held key: %v, want ErrTaken or ErrFailed", err)
	}
	if until := m1.Until(); !until.After(time.Now()) {
		t.Fatalf("a held mutex's validity ends at %v, in the past", until)
	}
	if ok, err := m1.ExtendContext(ctx); !ok || err != nil {
		t.Fatalf("extend: %v %v", ok, err)
	}
	if ok, err := other.UnlockContext(ctx); ok || err == nil {
		t.Fatalf("unlock by a non-holder: %v %v", ok, err)
	}
	if ok, err := m1.UnlockContext(ctx); !ok || err != nil {
		t.Fatalf("unlock: %v %v", ok, err)
	}
	if ok, _ := m1.UnlockContext(ctx); ok {
		t.Fatal("second unlock reported success")
	}

	// Contention: the waiter is handed the lock when the holder unlocks,
	// well before its retry delay would have come round.
	holder := rs.NewMutex("hot", redsync.WithExpiry(8*time.Second))
	if err := holder.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time)
	go func() {
		w := rs.NewMutex("hot", redsync.WithExpiry(8*time.Second))
		if err := w.LockContext(ctx); err != nil {
			t.Error(err)
		}
		got <- time.Now()
		w.UnlockContext(ctx)
	}()
	time.Sleep(100 * time.Millisecond)
	released := time.Now()
	holder.UnlockContext(ctx)
	if at := <-got; at.Before(released) {
		t.Fatal("waiter acquired before the holder unlocked")
	}

	// Expiry: a lock that is never unlocked is released when its TTL runs
	// out, and the next client gets it.
	start := time.Now() // before the TTL starts: an early grant shows whatever the load
	lost := rs.NewMutex("ttl", redsync.WithExpiry(300*time.Millisecond))
	if err := lost.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	next := rs.NewMutex("ttl", redsync.WithExpiry(time.Second), redsync.WithTries(64))
	if err := next.LockContext(ctx); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
	if d := time.Since(start); d < 290*time.Millisecond {
		t.Fatalf("acquired %v after the first lock, before its TTL", d)
	}
	if lost.Until().After(time.Now()) {
		t.Fatal("an expired mutex claims to be valid")
	}
}

// TestRedsyncThreeProxies is RedLock with three pools, each a proxy process,
// all on one memory node process: quorum works, exclusion holds, with owner
// recognition alone and with quorum routing.
func TestRedsyncThreeProxies(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{{"recognition", []string{"-redlock-quorum"}}, {"routing", []string{"-quorum-routing"}}} {
		t.Run(tc.name, func(t *testing.T) { redsyncThreeProxies(t, tc.args...) })
	}
}

func redsyncThreeProxies(t *testing.T, proxyArgs ...string) {
	_, ps := cluster(t, 3, proxyArgs...)
	rs := redsync.New(pools(t, ps[0].Addr, ps[1].Addr, ps[2].Addr)...)
	ctx := ctxT(t, 2*time.Minute)
	m := rs.NewMutex("q", redsync.WithExpiry(5*time.Second))
	if err := m.LockContext(ctx); err != nil {
		t.Fatalf("lock through three proxies: %v", err)
	}
	if err := rs.NewMutex("q", redsync.WithTries(1)).LockContext(ctx); err == nil {
		t.Fatal("second client got quorum on a held key")
	}
	if ok, err := m.ExtendContext(ctx); !ok || err != nil {
		t.Fatalf("extend: %v %v", ok, err)
	}
	if ok, err := m.UnlockContext(ctx); !ok || err != nil {
		t.Fatalf("unlock: %v %v", ok, err)
	}

	// Many clients, each with its own RedLock over the three proxies: the
	// counter they guard must end exactly right, with nobody inside twice.
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	const workers, rounds = 8, 8
	count := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				mu := rs.NewMutex("counter", redsync.WithExpiry(5*time.Second), redsync.WithTries(200))
				if err := mu.LockContext(ctx); err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n > maxInside.Load() {
					maxInside.Store(n)
				}
				count++
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if ok, err := mu.UnlockContext(ctx); !ok || err != nil {
					t.Errorf("unlock: %v %v", ok, err)
				}
			}
		}()
	}
	wg.Wait()
	if maxInside.Load() != 1 || count != workers*rounds {
		t.Fatalf("max inside %d (want 1), count %d (want %d)", maxInside.Load(), count, workers*rounds)
	}
}
