package itest

import (
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// casDelete is the compare-and-delete that hand-rolled clients copy from the
// Redis documentation's distributed-lock page, written out by us. Its
// whitespace differs from every catalogued client's, so the proxy can only
// accept it by recognising the normalised body.
const casDelete = `if redis.call("get",KEYS[1]) == ARGV[1] then
    return redis.call("del",KEYS[1])
else
    return 0
end`

// TestGoRedisSetNXAndScript is the hand-rolled client: SET NX PX and the
// compare-and-delete script from the Redis documentation.
func TestGoRedisSetNXAndScript(t *testing.T) {
	p := testproc.Proxy(t)
	c := client(t, p.Addr)
	ctx := ctxT(t, 30*time.Second)
	ok, err := c.SetNX(ctx, "k", "me", 10*time.Second).Result()
	if !ok || err != nil {
		t.Fatalf("SetNX: %v %v", ok, err)
	}
	ok, err = c.SetNX(ctx, "k", "you", 10*time.Second).Result()
	if ok || err != nil {
		t.Fatalf("SetNX on a held key: %v %v", ok, err)
	}
	if v, _ := c.Get(ctx, "k").Result(); v != "me" {
		t.Fatalf("GET = %q", v)
	}
	if d, _ := c.PTTL(ctx, "k").Result(); d <= 9*time.Second || d > 10*time.Second {
		t.Fatalf("PTTL = %v", d)
	}
	script := goredis.NewScript(casDelete)
	if n, err := script.Run(ctx, c, []string{"k"}, "you").Int(); n != 0 || err != nil {
		t.Fatalf("delete with the wrong token: %d %v", n, err)
	}
	if n, err := script.Run(ctx, c, []string{"k"}, "me").Int(); n != 1 || err != nil {
		t.Fatalf("delete with the right token: %d %v", n, err)
	}
	if n, _ := c.Exists(ctx, "k").Result(); n != 0 {
		t.Fatal("key still exists after delete")
	}
	// Options in any order and case.
	if v, err := c.Do(ctx, "set", "k2", "v", "px", "5000", "nx").Result(); v != "OK" || err != nil {
		t.Fatalf("set px nx: %v %v", v, err)
	}
	if v, err := c.Do(ctx, "SET", "k3", "v", "EX", "8", "NX").Result(); v != "OK" || err != nil {
		t.Fatalf("SET EX NX: %v %v", v, err)
	}
	if n, _ := c.Del(ctx, "k2", "k3", "nothing").Result(); n != 2 {
		t.Fatalf("DEL count %d", n)
	}
	if _, err := c.HSet(ctx, "h", "f", "v").Result(); err == nil {
		t.Fatal("HSET must be refused by a lock proxy")
	}
	if _, err := c.Set(ctx, "plain", "v", 0).Result(); err == nil {
		t.Fatal("plain SET must be refused: it would overwrite a lock")
	}
	if _, err := c.EvalSha(ctx, "0123456789012345678901234567890123456789", nil).Result(); err == nil || err.Error() != "NOSCRIPT No matching script. Please use EVAL." {
		t.Fatalf("unknown sha: %v", err)
	}
}

// TestRedislock094 drives bsm/redislock v0.9.4.
func TestRedislock094(t *testing.T) {
	p := testproc.Proxy(t)
	c := client(t, p.Addr)
	ctx := ctxT(t, 30*time.Second)
	locker := redislock.New(c)
	l, err := locker.Obtain(ctx, "rl", 2*time.Second, nil)
	if err != nil {
		t.Fatalf("obtain: %v", err)
	}
	if _, err := locker.Obtain(ctx, "rl", time.Second, nil); err != redislock.ErrNotObtained {
		t.Fatalf("obtain a held key: %v, want ErrNotObtained", err)
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
	if l.Token() == "" || l.Key() != "rl" {
		t.Fatalf("lock identity: %q %q", l.Key(), l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := l.Release(ctx); err != redislock.ErrLockNotHeld {
		t.Fatalf("second release: %v, want ErrLockNotHeld", err)
	}
	if ttl, err := l.TTL(ctx); ttl != 0 || err != nil {
		t.Fatalf("TTL of a released lock: %v %v", ttl, err)
	}
	// Contention with redislock's own retry: the waiter gets the lock once
	// the holder's TTL runs out.
	if _, err := locker.Obtain(ctx, "exp", 300*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	l2, err := locker.Obtain(ctx, "exp", time.Second, &redislock.Options{RetryStrategy: redislock.LinearBackoff(50 * time.Millisecond)})
	if err != nil {
		t.Fatalf("obtain after expiry: %v", err)
	}
	l2.Release(ctx)
}
