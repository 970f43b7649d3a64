package bank_test

import (
	"context"
	"errors"
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

// interleave runs first under l1, and, while first holds its locks between
// its reads and its writes (ExecOptions.Hold), runs second under l2 from
// start to end. The two lockers lock the same servers; only their TTLs
// differ: first's is short so that it runs out while first holds, and
// second's must cover second's whole transaction, which on a loaded CI
// machine can take longer than first's 20 ms. Under a lock that works, second can only start once first's lock is
// gone: the lockers wait for it (redlock-rs retries, LOCK.ACQUIRE queues),
// so with a short TTL second runs exactly when first's lock has expired,
// and first then writes what it computed from its stale read. Nothing is
// left to the scheduler. The bank is audited over the two, counting the
// deltas and overdrafts of the transactions that committed, as Run does.
func (c *cluster) interleave(t *testing.T, l1, l2 bank.Locker, opt bank.ExecOptions, first, second bank.Txn) (a bank.Audit, err1, err2 error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before, err := bank.Scan(ctx, c.data, testAccounts)
	if err != nil {
		t.Fatal(err)
	}
	var o2 bank.Outcome
	ran := false
	opt1 := opt
	opt1.Hold = func() {
		ran = true
		o2, err2 = bank.Exec(ctx, c.data, l2, second, opt)
	}
	o1, err1 := bank.Exec(ctx, c.data, l1, first, opt1)
	if !ran {
		t.Fatalf("the first transaction ended before its writes: %v", err1)
	}
	if a.After, err = bank.Scan(ctx, c.data, testAccounts); err != nil {
		t.Fatal(err)
	}
	a.Before = before
	for _, r := range []struct {
		o   bank.Outcome
		err error
	}{{o1, err1}, {o2, err2}} {
		if r.err == nil || (errors.Is(r.err, bank.ErrRelease) && !errors.Is(r.err, bank.ErrFenced)) {
			a.Deltas += r.o.Delta
			if r.o.Overdrawn {
				a.Overdrawn++
			}
		}
	}
	a.Check()
	t.Logf("%s: first %v; second %v; audit OK=%v %v", l1.Name(), err1, err2, a.OK, a.Problems)
	return a, err1, err2
}

func (c *cluster) balance(t *testing.T, key string) int64 {
	t.Helper()
	v, err := c.data.Get(context.Background(), key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestAuditCatchesNoLocks shows the audit can fail: without locks, two
// transactions on one account lose an update (absolute writes) or overdraw
// savings (delta writes). The second runs inside the first's read-to-write
// window, every time (interleave): before, the test hoped for the overlap
// in up to five one-second runs of 32 clients, and the final scan alone
// missed overdrafts that a later deposit repaired.
func TestAuditCatchesNoLocks(t *testing.T) {
	c := startCluster(t)
	const acct = 7
	start := c.balance(t, bank.CheckingKey(acct))
	a, _, _ := c.interleave(t, bank.NoLocker{}, bank.NoLocker{}, bank.ExecOptions{Writes: bank.WritesSet},
		bank.Txn{Type: bank.DepositChecking, A: acct, Amount: 100}, bank.Txn{Type: bank.DepositChecking, A: acct, Amount: 1000})
	if a.OK || a.Mismatch != -1000 {
		t.Errorf("absolute writes without locks: audit OK=%v, mismatch %d, want the second deposit's -1000 lost", a.OK, a.Mismatch)
	}
	if got := c.balance(t, bank.CheckingKey(acct)); got != start+100 {
		t.Errorf("checking %d, want %d: the first deposit's stale write wins", got, start+100)
	}

	// Both withdraw the whole savings balance; each saw enough money.
	savings := c.balance(t, bank.SavingsKey(acct))
	if savings <= 0 {
		t.Fatalf("account %d has savings %d: pick one with money", acct, savings)
	}
	withdraw := bank.Txn{Type: bank.TransactSavings, A: acct, Amount: -savings}
	a, _, _ = c.interleave(t, bank.NoLocker{}, bank.NoLocker{}, bank.ExecOptions{Writes: bank.WritesIncr}, withdraw, withdraw)
	if a.OK || a.Overdrawn != 1 || a.After.NegativeSavings == 0 {
		t.Errorf("delta writes without locks: audit OK=%v, %d overdrawn writes, %d negative savings; want the first withdrawal's write overdrawn", a.OK, a.Overdrawn, a.After.NegativeSavings)
	}
}

// TestShortTTLCorruptsRedLockButNotFencedProxy is the safety story: a
// holder whose lock expires while it works (here, held past its TTL between
// its read and its write) lets a second holder in. With RedLock (the
// redlock-rs-style client), the first holder's stale write then undoes the
// second's and the books stop adding up. With the proxy, whose fencing
// tokens the data store checks, the stale write is refused and the books
// stay exact. Before, the test ran eight one-second loads with a 4 ms TTL
// and hoped a lock would expire in a transaction's middle; on an idle
// machine none did.
func TestShortTTLCorruptsRedLockButNotFencedProxy(t *testing.T) {
	c := startCluster(t)
	const acct = 11
	const ttl = 20 * time.Millisecond
	first := bank.Txn{Type: bank.DepositChecking, A: acct, Amount: 100}
	second := bank.Txn{Type: bank.DepositChecking, A: acct, Amount: 1000}

	rl, err := bank.NewRedlockRSLocker(c.lockRedis[:1], ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	rl2, err := bank.NewRedlockRSLocker(c.lockRedis[:1], 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer rl2.Close()
	start := c.balance(t, bank.CheckingKey(acct))
	a, err1, err2 := c.interleave(t, rl, rl2, bank.ExecOptions{Writes: bank.WritesSet}, first, second)
	if !errors.Is(err1, bank.ErrRelease) || err2 != nil {
		t.Errorf("redlock-rs: first %v (want its lock gone at release), second %v", err1, err2)
	}
	if a.OK || a.Mismatch != -second.Amount {
		t.Errorf("redlock-rs: audit OK=%v, mismatch %d; want the second deposit's %d lost", a.OK, a.Mismatch, -second.Amount)
	}
	if got := c.balance(t, bank.CheckingKey(acct)); got != start+first.Amount {
		t.Errorf("redlock-rs: checking %d, want %d (the stale write)", got, start+first.Amount)
	}

	fl, err := bank.NewLockCmdLocker(c.proxies[0], ttl, 30*time.Second, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	fl2, err := bank.NewLockCmdLocker(c.proxies[0], 30*time.Second, 30*time.Second, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer fl2.Close()
	start = c.balance(t, bank.CheckingKey(acct))
	a, err1, err2 = c.interleave(t, fl, fl2, bank.ExecOptions{Writes: bank.WritesSet, Fence: true}, first, second)
	if !errors.Is(err1, bank.ErrFenced) || err2 != nil {
		t.Errorf("fenced proxy: first %v (want fenced out), second %v", err1, err2)
	}
	if !a.OK {
		t.Errorf("fenced proxy: audit failed: %v", a.Problems)
	}
	if got := c.balance(t, bank.CheckingKey(acct)); got != start+second.Amount {
		t.Errorf("fenced proxy: checking %d, want %d (the second deposit only)", got, start+second.Amount)
	}
}
