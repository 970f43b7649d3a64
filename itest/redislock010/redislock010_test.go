// Package redislock010 tests the proxy with bsm/redislock v0.10, which needs
// its own module because the main module pins v0.9.4 of the same library.
package redislock010

import (
	"context"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

func TestRedislock010(t *testing.T) {
	p := testproc.Proxy(t)
	c := redis.NewClient(&redis.Options{Addr: p.Addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	locker := redislock.New(c)

	l, err := locker.Obtain(ctx, "rl10", 2*time.Second, &redislock.Options{Metadata: "meta"})
	if err != nil {
		t.Fatalf("obtain: %v", err)
	}
	if l.Metadata() != "meta" || l.Key() != "rl10" || l.Token() == "" {
		t.Fatalf("lock: key %q token %q metadata %q", l.Key(), l.Token(), l.Metadata())
	}
	if _, err := locker.Obtain(ctx, "rl10", time.Second, nil); err != redislock.ErrNotObtained {
		t.Fatalf("obtain a held key: %v", err)
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl <= time.Second || ttl > 2*time.Second {
		t.Fatalf("TTL: %v %v", ttl, err)
	}
	if err := l.Refresh(ctx, 5*time.Second, nil); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if ttl, _ := l.TTL(ctx); ttl <= 4*time.Second {
		t.Fatalf("TTL after refresh: %v", ttl)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := l.Release(ctx); err != redislock.ErrLockNotHeld {
		t.Fatalf("second release: %v", err)
	}

	// v0.10's multi-key obtain: all keys or none.
	m, err := locker.ObtainMulti(ctx, []string{"a", "b", "c"}, 2*time.Second, nil)
	if err != nil {
		t.Fatalf("obtain multi: %v", err)
	}
	if _, err := locker.ObtainMulti(ctx, []string{"c", "d"}, time.Second, nil); err != redislock.ErrNotObtained {
		t.Fatalf("obtain multi overlapping a held key: %v", err)
	}
	if n, _ := c.Exists(ctx, "d").Result(); n != 0 {
		t.Fatal("a failed multi-key obtain left a key held")
	}
	if err := m.Refresh(ctx, 3*time.Second, nil); err != nil {
		t.Fatalf("refresh multi: %v", err)
	}
	if err := m.Release(ctx); err != nil {
		t.Fatalf("release multi: %v", err)
	}
	if n, _ := c.Exists(ctx, "a", "b", "c").Result(); n != 0 {
		t.Fatalf("%d keys left after multi release", n)
	}
}
