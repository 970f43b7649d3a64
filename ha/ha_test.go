package ha_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shiftlock/shiftlock-proxy/ha"
	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
)

func dial(t *testing.T, c *testproc.EtcdCluster) *clientv3.Client {
	t.Helper()
	cli, err := ha.Dial(c.Endpoints(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func campaign(t *testing.T, cli *clientv3.Client, name string) *ha.Leader {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := ha.Campaign(ctx, cli, ha.LeaderConfig{Shard: "s1", Name: name, Advertise: name, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Resign(context.Background()) })
	return l
}

// activeLeader is the active node of shard s1, "a", with a 1 s lease and
// the given patience, for a test that then takes its etcd away (so no
// resign when it ends: it would wait on the lost etcd). ctx is the
// campaign's, and ends with the test.
func activeLeader(t *testing.T, cli *clientv3.Client, patience time.Duration) (*ha.Leader, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	l, err := ha.Campaign(ctx, cli, ha.LeaderConfig{Shard: "s1", Name: "a", Advertise: "a", TTL: time.Second, Patience: patience})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Take(ctx, memnode.Config{}); err != nil {
		t.Fatal(err)
	}
	return l, ctx
}

// A successor starts above every fencing token and horizon its predecessor
// saved, and only the leader can write the record.
func TestTakeoverStartsANewGeneration(t *testing.T) {
	etcd := testproc.Etcd(t, 1)
	cli := dial(t, etcd)
	ctx := context.Background()
	base := memnode.Config{DeadAfter: time.Second}

	a := campaign(t, cli, "a:1")
	cfg, grace, err := a.Take(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Generation != 1 || cfg.RelBase != 0 || grace != 0 || cfg.Store == nil {
		t.Fatalf("first generation: gen %d base %d grace %v", cfg.Generation, cfg.RelBase, grace)
	}
	if err := a.Update(func(s *memnode.State) bool { s.MaxHorizonMs, s.RelHighWater = 1500, 5000; return true }); err != nil {
		t.Fatal(err)
	}

	won := make(chan *ha.Leader, 1)
	go func() {
		l, err := ha.Campaign(ctx, cli, ha.LeaderConfig{Shard: "s1", Name: "b:2", Advertise: "b:2", TTL: time.Second})
		if err != nil {
			t.Error(err)
			close(won)
			return
		}
		won <- l
	}()
	select {
	case <-won:
		t.Fatal("a standby won while the active node leads")
	case <-time.After(1500 * time.Millisecond):
	}
	a.Resign(ctx)
	var b *ha.Leader
	select {
	case b = <-won:
	case <-time.After(10 * time.Second):
		t.Fatal("the standby did not win after the leader resigned")
	}
	if b == nil {
		t.FailNow()
	}
	defer b.Resign(ctx)
	cfg, grace, err = b.Take(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Generation != 2 || cfg.RelBase != 5000+rdma.RecoveryLeap {
		t.Fatalf("second generation: gen %d base %d", cfg.Generation, cfg.RelBase)
	}
	horizon, drift := 1500*time.Millisecond, 1e-3
	if want := time.Duration(float64(horizon)*(1+drift)) + time.Second; grace != want {
		t.Fatalf("grace %v, want %v", grace, want)
	}
	rec, ok, err := ha.Read(ctx, cli, "s1")
	if err != nil || !ok || rec.Active != "b:2" || rec.Generation != 2 {
		t.Fatalf("record %+v ok %v err %v", rec, ok, err)
	}
	// The deposed leader can no longer write.
	if err := a.Update(func(s *memnode.State) bool { s.MaxHorizonMs = 99999; return true }); !errors.Is(err, ha.ErrNotLeader) {
		t.Fatalf("deposed leader's update: %v", err)
	}
	if rec, _, _ := ha.Read(ctx, cli, "s1"); rec.MaxHorizonMs == 99999 {
		t.Fatal("a deposed leader changed the record")
	}
}

// A leader whose lease is gone (here revoked, as an expiry would) learns it
// at its next write and from its keeper, and stops.
func TestLeaderWithoutLeaseIsDeposed(t *testing.T) {
	etcd := testproc.Etcd(t, 1)
	cli := dial(t, etcd)
	ctx := context.Background()
	a := campaign(t, cli, "a:1")
	if _, _, err := a.Take(ctx, memnode.Config{}); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, ha.Prefix+"s1/election", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("election keys: %v %v", resp, err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("a leader without its lease did not step down")
	}
	if err := a.Update(func(s *memnode.State) bool { s.Generation = 42; return true }); err == nil {
		t.Fatal("update after losing the lease succeeded")
	}
}

// With etcd gone, a leader stops serving within its lease plus patience: it
// cannot know whether a successor is about to be elected.
func TestLeaderStopsWhenEtcdIsGone(t *testing.T) {
	etcd := testproc.Etcd(t, 1)
	l, _ := activeLeader(t, dial(t, etcd), 300*time.Millisecond)
	killed := time.Now()
	etcd.Kill(0)
	select {
	case <-l.Lost():
		// the last renewal was sent at most TTL/4 before the kill
		if took := time.Since(killed); took > 1300*time.Millisecond+time.Second {
			t.Fatalf("stopped %v after etcd died; the bound is TTL + patience", took)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the leader kept serving without etcd")
	}
}

// A renewal that hangs (etcd frozen, not gone) must not delay the
// deposition past the validity the last answered renewal gave: a successor's
// grace counts on it.
func TestLeaderStopsOnTimeWhenEtcdHangs(t *testing.T) {
	etcd := testproc.Etcd(t, 1)
	cli := dial(t, etcd)
	const patience = 300 * time.Millisecond
	l, ctx := activeLeader(t, cli, patience)
	resp, err := cli.TimeToLive(ctx, clientv3.LeaseID(mustLease(t, cli)))
	if err != nil {
		t.Fatal(err)
	}
	ttl := time.Duration(resp.GrantedTTL) * time.Second
	if err := etcd.Freeze(0); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	select {
	case <-l.Lost():
		// The last answered renewal was sent before the freeze, so the
		// validity ends within ttl + patience of it. Renewals block for
		// ttl/2 each; 200 ms is for scheduling only.
		if took, bound := time.Since(frozen), ttl+patience+200*time.Millisecond; took > bound {
			t.Fatalf("stopped %v after etcd froze; the validity ends within %v", took, ttl+patience)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the leader kept serving with etcd frozen")
	}
}

// mustLease is the lease of the only election key.
func mustLease(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), ha.Prefix+"s1/election", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("election keys: %v %v", resp, err)
	}
	return resp.Kvs[0].Lease
}

// A follower sees each new active node.
func TestFollowerSeesTheNewActive(t *testing.T) {
	etcd := testproc.Etcd(t, 1)
	cli := dial(t, etcd)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := ha.Follow(ctx, cli, "s1", nil)
	changed := f.Changed()
	if _, ok := f.Current(); ok {
		t.Fatal("a record before any node was active")
	}
	a := campaign(t, cli, "a:1")
	if _, _, err := a.Take(ctx, memnode.Config{}); err != nil {
		t.Fatal(err)
	}
	waitChange(t, changed)
	if rec, ok := f.Current(); !ok || rec.Active != "a:1" || rec.Generation != 1 {
		t.Fatalf("follower sees %+v %v", rec, ok)
	}
	changed = f.Changed()
	a.Resign(ctx)
	b := campaign(t, cli, "b:2")
	if _, _, err := b.Take(ctx, memnode.Config{}); err != nil {
		t.Fatal(err)
	}
	waitChange(t, changed)
	if rec, _ := f.Current(); rec.Active != "b:2" || rec.Generation != 2 {
		t.Fatalf("follower sees %+v", rec)
	}
}

func waitChange(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no change seen")
	}
}

// TestStandbyStopsWhenEtcdIsGone: a standby told to stop (its context
// cancelled, a memnode's SIGTERM) returns from Campaign although etcd is
// gone. etcd's Election.Campaign, cancelled, resigns with the client's own
// context, which retries for as long as etcd is unreachable: `make
// test-demos` hung in CI's clean-clone run on a standby memnode that
// ignored SIGTERM after demo-ha had stopped its etcd.
func TestStandbyStopsWhenEtcdIsGone(t *testing.T) {
	etcd := testproc.Etcd(t, 1)
	cli := dial(t, etcd)
	lctx, lcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer lcancel()
	if _, err := ha.Campaign(lctx, cli, ha.LeaderConfig{Shard: "s1", Name: "a:1", Advertise: "a:1", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := ha.Campaign(ctx, cli, ha.LeaderConfig{Shard: "s1", Name: "b:1", Advertise: "b:1", TTL: time.Second})
		errc <- err
	}()
	time.Sleep(500 * time.Millisecond) // b is standing by
	etcd.Kill(0)
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled campaign: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a standby told to stop was still campaigning 20 s later, etcd gone")
	}
}
