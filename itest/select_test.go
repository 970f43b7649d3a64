package itest

import (
	"strings"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestSelectParity: SELECT chooses one of 16 databases, whose keys are
// locks of their own, as redis-server's are keys of their own; RESET goes
// back to database 0, and the index is read as Redis reads integers. Sent
// to both, each sequence on a new connection. Before, the proxy refused
// every database but 0 ("ERR DB index is out of range"), so a lock client
// configured with another (redis://host:6379/3, go-redis Options.DB,
// redis-py db=3) could not connect.
func TestSelectParity(t *testing.T) {
	rs := testproc.Redis(t)
	cases := []string{
		respCmd("SELECT", "3") + respCmd("SET", "s1", "a", "NX", "PX", "60000") + respCmd("GET", "s1") +
			respCmd("SELECT", "0") + respCmd("GET", "s1") + respCmd("EXISTS", "s1") + respCmd("SET", "s1", "b", "NX", "PX", "60000") +
			respCmd("SELECT", "3") + respCmd("GET", "s1") + respCmd("PTTL", "s1") + respCmd("DEL", "s1") + respCmd("GET", "s1") +
			respCmd("SELECT", "0") + respCmd("GET", "s1"),
		respCmd("SELECT", "16") + respCmd("SELECT", "-1") + respCmd("SELECT", "abc") + respCmd("SELECT", "+1") +
			respCmd("SELECT", "01") + respCmd("SELECT", "15") + respCmd("SELECT", "1", "2"),
		respCmd("SELECT", "2") + respCmd("SET", "s3", "a", "NX", "PX", "60000") + respCmd("RESET") + respCmd("GET", "s3") +
			respCmd("SELECT", "2") + respCmd("GET", "s3"),
		respCmd("SELECT", "4") + respCmd("EVAL", casDelete, "1", "s4", "a") + respCmd("SET", "s4", "a", "NX", "PX", "60000") +
			respCmd("SELECT", "5") + respCmd("EVAL", casDelete, "1", "s4", "a") + respCmd("SELECT", "4") + respCmd("EVAL", casDelete, "1", "s4", "a") +
			respCmd("EXISTS", "s4") + respCmd("SET", "s5", "a", "NX", "PX", "60000") + respCmd("PEXPIRE", "s5", "100000") + respCmd("UNLINK", "s5", "s4"),
	}
	sameAsRedis(t, rs, cases)
}

// TestDatabasesWithRealClients: go-redis clients configured with DB 3 and
// DB 0 (they SELECT on every new connection) lock the same key name with
// redsync at once, each excluding its own database's other clients only;
// CLIENT LIST shows the database, and LOCK.INFO the key as the client
// named it.
func TestDatabasesWithRealClients(t *testing.T) {
	p := testproc.Proxy(t)
	ctx := ctxT(t, 30*time.Second)
	db := func(n int) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: p.Addr, DB: n, PoolSize: 2})
		t.Cleanup(func() { c.Close() })
		return c
	}
	c3, c0, other3 := db(3), db(0), db(3)
	m3 := redsync.New(goredis.NewPool(c3)).NewMutex("job", redsync.WithTries(1))
	m0 := redsync.New(goredis.NewPool(c0)).NewMutex("job", redsync.WithTries(1))
	if err := m3.LockContext(ctx); err != nil {
		t.Fatalf("redsync over DB 3: %v", err)
	}
	if err := m0.LockContext(ctx); err != nil {
		t.Fatalf("redsync over DB 0, with job held in DB 3: %v", err)
	}
	// Another client of database 3 finds job held there.
	if ok, err := other3.SetNX(ctx, "job", "x", time.Minute).Result(); ok || err != nil {
		t.Fatalf("SET job NX in DB 3 while redsync holds it there: %v %v", ok, err)
	}
	info, err := c3.Do(ctx, "LOCK.INFO", "job").Result()
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := info.(map[any]any); !ok || m["key"] != "job" || m["state"] != "held" {
		t.Errorf("LOCK.INFO job in DB 3 = %v, want key job, held", info)
	}
	list, err := c3.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(list, " db=3 ") || !strings.Contains(list, " db=0 ") {
		t.Errorf("CLIENT LIST does not show databases 3 and 0:\n%s", list)
	}
	if ok, err := m3.UnlockContext(ctx); !ok || err != nil {
		t.Fatalf("unlock in DB 3: %v %v", ok, err)
	}
	if ok, err := m0.UnlockContext(ctx); !ok || err != nil {
		t.Fatalf("unlock in DB 0: %v %v", ok, err)
	}
}
