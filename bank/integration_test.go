package bank_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/bank"
	"github.com/shiftlock/shiftlock-proxy/internal/keydist"
	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

const testAccounts = 10_000

// cluster is every server the lockers need, as real processes: the bank's
// redis-server, three lock redis-servers, a memory node, three proxies
// joined to it, and one proxy with its own embedded memory node.
type cluster struct {
	data               *redis.Client
	lockRedis, proxies []string
	embedded, memnode  string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{}
	data := testproc.Redis(t)
	for range 3 {
		c.lockRedis = append(c.lockRedis, testproc.Redis(t).Addr)
	}
	mn := testproc.Memnode(t)
	c.memnode = mn.Addr
	for range 3 {
		c.proxies = append(c.proxies, testproc.Proxy(t, "-memnode", mn.Addr, "-log-level", "warn", "-redlock-quorum").Addr)
	}
	c.embedded = testproc.Proxy(t, "-log-level", "warn").Addr
	c.data = redis.NewClient(&redis.Options{Addr: data.Addr, PoolSize: 64})
	t.Cleanup(func() { c.data.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := bank.Load(ctx, c.data, bank.LoadConfig{Accounts: testAccounts, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	return c
}

// run runs one locker under contention: a hotspot of 10 accounts gets 90%
// of the draws.
func (c *cluster) run(t *testing.T, lc bank.LockerConfig, skew string, clients int, writes bank.WriteMode, d time.Duration) *bank.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lc.PoolSize, lc.NativeWait = clients+8, 5*time.Second
	l, servers, err := bank.OpenLocker(ctx, lc)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dist, err := keydist.Parse(skew, testAccounts)
	if err != nil {
		t.Fatal(err)
	}
	res, err := bank.Run(ctx, bank.RunConfig{Data: c.data, Locker: l, Servers: servers, Mix: bank.Mixes["smallbank"],
		MixName: "smallbank", Dist: dist, Skew: skew, Accounts: testAccounts, Clients: clients,
		Warmup: d / 4, Duration: d, Writes: writes, Seed: 11, Fence: lc.Fence})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s on %s: %.0f txn/s, %d committed (%d declined), %d aborts, %d dropped, p50 %dµs p99 %dµs, %d expired, %d fenced; audit OK=%v %v",
		res.Series(), skew, res.Goodput, res.All.Committed, res.All.Declined, res.All.Aborts, res.Dropped,
		res.All.P50, res.All.P99, res.Expired, res.Fenced, res.Audit.OK, res.Audit.Problems)
	return res
}

const contended = "hotspot:0.1:90" // 10 of the 10,000 accounts get 90% of the draws

// TestLockersKeepTheBooks runs every locker against real servers under
// contention; the audit must pass for every locker that locks.
func TestLockersKeepTheBooks(t *testing.T) {
	c := startCluster(t)
	for _, lc := range []bank.LockerConfig{
		{Name: "redlock", LockRedis: c.lockRedis[:1]},
		{Name: "redlock", LockRedis: c.lockRedis},
		{Name: "proxy", Proxies: c.proxies[:1]},
		{Name: "proxy", Proxies: c.proxies}, // RedLock quorum over three proxies on one memory node
		{Name: "proxy", Proxies: []string{c.embedded}},
		{Name: "native", Memnodes: []string{c.memnode}},
		{Name: "native", Memnodes: []string{c.memnode}, Fence: true},
		{Name: "proxy", Proxies: c.proxies[:1], Fence: true}, // LOCK.ACQUIRE, tokens checked by the data store
		{Name: "redlock-rs", LockRedis: c.lockRedis[:1], TTL: 5 * time.Second},
	} {
		res := c.run(t, lc, contended, 16, bank.WritesSet, 2*time.Second)
		if !res.Audit.OK {
			t.Errorf("%s: audit failed: %v", res.Series(), res.Audit.Problems)
		}
		if res.All.Committed == 0 || res.All.Errors != 0 {
			t.Errorf("%s: %d committed, %d errors %v", res.Series(), res.All.Committed, res.All.Errors, res.Errors)
		}
		for _, typ := range []string{"Amalgamate", "Balance", "SendPayment", "WriteCheck"} {
			if s := res.Types[typ]; s == nil || s.Committed == 0 {
				t.Errorf("%s: no %s committed", res.Series(), typ)
			}
		}
	}
}

// TestAuditCatchesNoLocks shows the audit can fail: without locks, the
// same contention loses updates (absolute writes) or overdraws savings
// (delta writes). Contention is random, so each gets a few tries.
//
// An overdraft needs two withdrawals (or a withdrawal and an Amalgamate)
// on one account inside each other's read-to-write window while its
// savings are low. The final scan alone missed five one-second runs in a
// row on a loaded CI host even with every hot draw on one account: a later
// deposit or Amalgamate repairs the balance. The audit therefore also
// counts the writes the data store answered with a negative savings
// balance (Audit.Overdrawn).
func TestAuditCatchesNoLocks(t *testing.T) {
	c := startCluster(t)
	caught := func(writes bank.WriteMode, skew string, bad func(*bank.Result) bool) {
		for try := 1; try <= 5; try++ {
			res := c.run(t, bank.LockerConfig{Name: "none"}, skew, 32, writes, time.Second)
			if bad(res) {
				return
			}
		}
		t.Errorf("writes=%v on %s: five runs without locks and the audit never failed", writes, skew)
	}
	caught(bank.WritesSet, contended, func(r *bank.Result) bool { return !r.Audit.OK && r.Audit.Mismatch != 0 })
	caught(bank.WritesIncr, "hotspot:0.01:90", func(r *bank.Result) bool {
		return !r.Audit.OK && (r.Audit.Overdrawn > 0 || r.Audit.After.NegativeSavings > 0)
	})
}

// TestShortTTLCorruptsRedLockButNotFencedProxy is the safety story: with
// a lock TTL shorter than the transactions, RedLock (the redlock-rs-style
// client) lets two holders work on one account and the books stop adding
// up, while the proxy, whose fencing tokens the data store checks, keeps
// them exact: what would have been a lost update is refused and retried.
func TestShortTTLCorruptsRedLockButNotFencedProxy(t *testing.T) {
	c := startCluster(t)
	const hot = "hotspot:0.01:90" // one account gets 90% of the draws
	corrupted, expired := false, false
	for try := 1; try <= 8 && !corrupted; try++ {
		// Not 2 ms: the crate's validity check (TTL - 2 ms drift - elapsed)
		// refuses every try that takes under 1 ms at a TTL of 2 ms.
		res := c.run(t, bank.LockerConfig{Name: "redlock-rs", LockRedis: c.lockRedis[:1], TTL: 4 * time.Millisecond}, hot, 32, bank.WritesSet, time.Second)
		if res.Expired > 0 && res.Audit.OK {
			t.Errorf("redlock-rs with %d expired locks passed its audit", res.Expired)
		}
		expired = expired || res.Expired > 0
		corrupted = res.Audit.Mismatch != 0
	}
	if !expired {
		t.Error("redlock-rs with a 4 ms TTL: no lock ever expired before release")
	}
	if !corrupted {
		t.Error("eight runs of redlock-rs with a 4 ms TTL and the money always added up")
	}
	fenced := false
	for try := 1; try <= 8 && !fenced; try++ {
		res := c.run(t, bank.LockerConfig{Name: "proxy", Proxies: c.proxies[:1], Fence: true, TTL: 2 * time.Millisecond}, hot, 32, bank.WritesSet, time.Second)
		if !res.Audit.OK {
			t.Fatalf("fenced proxy with a 2 ms TTL failed its audit: %v", res.Audit.Problems)
		}
		if res.All.Committed == 0 {
			t.Error("fenced proxy: nothing committed")
		}
		fenced = res.Fenced > 0
	}
	if !fenced {
		t.Error("eight runs of the fenced proxy with a 2 ms TTL and the fences never refused an attempt")
	}
}
