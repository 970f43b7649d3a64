package itest

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSameValueThroughTwoProxies: two applications on two hosts lock one key
// with the same constant value, each through its own proxy on one memory
// node. One redis-server keeps them apart, and so must the proxies: the
// second is refused while the first holds the key, and every grant's fence
// is its own. Before, `SET job:lock 1 NX PX 30000` answered OK through both
// proxies, and LOCK.ACQUIRE gave both callers fence 1 (owner recognition,
// meant for RedLock quorum clients, was on by default and took any value).
//
// With -redlock-quorum (RedLock clients use the proxies as their
// instances), a RedLock client's random token is recognised through the
// other proxy, and a constant value still is not.
func TestSameValueThroughTwoProxies(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{{"default", nil}, {"redlock-quorum", []string{"-redlock-quorum"}}} {
		t.Run(tc.name, func(t *testing.T) {
			_, ps := cluster(t, 2, append([]string{"-acquire-wait", "200ms"}, tc.args...)...)
			a, b := client(t, ps[0].Addr), client(t, ps[1].Addr)
			ctx := ctxT(t, time.Minute)

			if ok, err := a.SetNX(ctx, "job:lock", "1", 30*time.Second).Result(); !ok || err != nil {
				t.Fatalf("SET NX through proxy A: %v %v", ok, err)
			}
			if ok, err := b.SetNX(ctx, "job:lock", "1", 30*time.Second).Result(); ok || err != nil {
				t.Fatalf("SET job:lock 1 NX through proxy B while A's client holds it: %v %v, want nil", ok, err)
			}

			fa, err := a.Do(ctx, "LOCK.ACQUIRE", "job:fenced", "1", "PX", "30000").Int64()
			if err != nil {
				t.Fatal(err)
			}
			if fb, err := b.Do(ctx, "LOCK.ACQUIRE", "job:fenced", "1", "PX", "30000", "WAIT", "300").Result(); err != redis.Nil {
				t.Fatalf("LOCK.ACQUIRE through B while A's client holds it: fence %v (A's %d), %v; want nil", fb, fa, err)
			}
			if n, err := a.Do(ctx, "LOCK.RELEASE", "job:fenced", "1").Int64(); n != 1 || err != nil {
				t.Fatalf("release through A: %v %v", n, err)
			}
			fb, err := b.Do(ctx, "LOCK.ACQUIRE", "job:fenced", "1", "PX", "30000", "WAIT", "5000").Int64()
			if err != nil || fb <= fa {
				t.Fatalf("LOCK.ACQUIRE through B after A let go: %v %v, want a fence above A's %d", fb, err, fa)
			}

			if tc.args == nil {
				return
			}
			// A RedLock client's token, asked through both, is one owner.
			const tok = "hK3v9QpLx2Zt7RwY1bNc8A=="
			if ok, err := a.SetNX(ctx, "quorum:k", tok, 30*time.Second).Result(); !ok || err != nil {
				t.Fatalf("RedLock token through A: %v %v", ok, err)
			}
			if ok, err := b.SetNX(ctx, "quorum:k", tok, 30*time.Second).Result(); !ok || err != nil {
				t.Fatalf("the same RedLock token through B is not recognised: %v %v", ok, err)
			}
		})
	}
}
