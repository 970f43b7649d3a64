package itest

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestACLUsers: a user from the config file authenticates by name and may
// acquire, release, extend and inspect only keys matching its patterns;
// requirepass stays the default user's password, with every key.
func TestACLUsers(t *testing.T) {
	cfg := tempFile(t, "proxy.yaml", `requirepass: "adminpw"
users:
  - {name: orders, password: "orderspw", keys: ["locks:orders:*"]}
`)
	p := testproc.Proxy(t, "-config", cfg)
	ctx := ctxT(t, time.Minute)
	orders := redis.NewClient(&redis.Options{Addr: p.Addr, Username: "orders", Password: "orderspw", MaxRetries: -1})
	admin := redis.NewClient(&redis.Options{Addr: p.Addr, Password: "adminpw", MaxRetries: -1})
	t.Cleanup(func() { orders.Close(); admin.Close() })
	release := redis.NewScript(casDelete)
	noperm := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Fatalf("%s outside the user's patterns: %v; want NOPERM", what, err)
		}
	}

	if ok, err := orders.SetNX(ctx, "locks:orders:1", "t", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("SET NX inside the pattern: %v %v", ok, err)
	}
	if err := orders.Do(ctx, "LOCK.EXTEND", "locks:orders:1", "t", "PX", 60000).Err(); err != nil {
		t.Fatalf("LOCK.EXTEND inside the pattern: %v", err)
	}
	if n, err := release.Run(ctx, orders, []string{"locks:orders:1"}, "t").Int(); n != 1 || err != nil {
		t.Fatalf("release inside the pattern: %d %v", n, err)
	}

	if ok, err := admin.SetNX(ctx, "locks:payments:1", "a", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("the default user on any key: %v %v", ok, err)
	}
	noperm("SET NX", orders.SetNX(ctx, "locks:payments:2", "t", time.Minute).Err())
	noperm("release", release.Run(ctx, orders, []string{"locks:payments:1"}, "a").Err())
	noperm("DEL", orders.Del(ctx, "locks:payments:1").Err())
	noperm("GET", orders.Get(ctx, "locks:payments:1").Err())
	noperm("LOCK.INFO", orders.Do(ctx, "LOCK.INFO", "locks:payments:1").Err())
	noperm("PEXPIRE", orders.PExpire(ctx, "locks:payments:1", time.Second).Err())
	noperm("EXISTS with one key outside", orders.Exists(ctx, "locks:orders:2", "locks:payments:1").Err())
	noperm("CLIENT LIST", orders.ClientList(ctx).Err())
	if v, err := admin.Get(ctx, "locks:payments:1").Result(); v != "a" || err != nil {
		t.Fatalf("the denied commands touched the admin's lock: %q %v", v, err)
	}

	bad := redis.NewClient(&redis.Options{Addr: p.Addr, Username: "orders", Password: "wrong", MaxRetries: -1})
	t.Cleanup(func() { bad.Close() })
	if err := bad.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("a wrong password: %v", err)
	}
	anon := client(t, p.Addr)
	if err := anon.SetNX(ctx, "locks:orders:9", "t", time.Minute).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("no AUTH: %v", err)
	}
	if out := strings.TrimSpace(admin.ClientList(ctx).Val()); !strings.Contains(out, "user=orders") {
		t.Fatalf("CLIENT LIST does not show the user:\n%s", out)
	}
}
