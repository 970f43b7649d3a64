package memnode_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// open is memnode.Open, failing the test on an error.
func open(t *testing.T, dir string, cfg memnode.Config) memnode.Config {
	t.Helper()
	cfg, err := memnode.Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestRestartKeepsTokensIncreasingAndWaitsOutLeases: a memory node that
// restarts from its state directory starts a new generation whose tokens lie
// above every token of the previous one, and refuses joins until the longest
// horizon it confirmed has passed.
func TestRestartKeepsTokensIncreasingAndWaitsOutLeases(t *testing.T) {
	dir := t.TempDir()
	// Timings generous enough for a loaded host: the lease self-fences after
	// DeadAfter/2 without an acknowledged beat, and a confirmation (a
	// sweep plus two fsyncs) gets ten beat intervals.
	base := memnode.Config{Entries: 64, HeartbeatInterval: 100 * time.Millisecond, DeadAfter: 2 * time.Second}
	cfg := open(t, dir, base)
	if cfg.Generation != 1 || !cfg.GraceUntil.IsZero() {
		t.Fatalf("first start: generation %d, grace until %v", cfg.Generation, cfg.GraceUntil)
	}
	host, _, ep := joinOne(t, cfg)
	if !ep.Layout().Persistent {
		t.Fatal("layout does not say the memory node is persistent")
	}
	lease := lockmap.NewLease(ep)
	c := shiftlock.NewClient(ep, shiftlock.Config{})
	ctx := context.Background()
	var last uint64
	for i := 0; i < 50; i++ {
		g, err := c.AcquireExclusive(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		last = g.Token()
		g.Release(ctx)
	}
	// A grant with a 400 ms TTL: the proxy must have that horizon confirmed.
	start := time.Now()
	if err := lease.Cover(ctx, time.Now().Add(400*time.Millisecond), 400*time.Millisecond); err != nil {
		t.Fatalf("cover: %v", err)
	}
	t.Logf("horizon confirmed after %v", time.Since(start))
	if err := lease.Cover(ctx, time.Now().Add(time.Hour), time.Hour); !errors.Is(err, lockmap.ErrTTLTooLong) {
		t.Fatalf("TTL over max_lease: %v", err)
	}
	time.Sleep(1500 * time.Millisecond) // beats and saves go on; the next generation starts a leap above the saved mark
	lease.Stop()
	host.Close() // the process dies: the table is gone

	opened := time.Now()
	cfg2 := open(t, dir, base)
	if cfg2.Generation != 2 {
		t.Fatalf("second start: generation %d", cfg2.Generation)
	}
	if grace := cfg2.GraceUntil.Sub(opened); grace < 400*time.Millisecond+base.DeadAfter {
		t.Fatalf("restart grace %v does not cover the 400 ms lease plus dead_after", grace)
	}
	host2 := memnode.New(cfg2)
	defer host2.Close()
	fab2 := memfab.New(host2)
	if _, err := fab2.Join("p"); !errors.Is(err, rdma.ErrUnavailable) && time.Now().Before(cfg2.GraceUntil) {
		t.Fatalf("join during the restart grace: %v", err)
	}
	time.Sleep(time.Until(cfg2.GraceUntil))
	ep2, err := fab2.Join("p")
	if err != nil {
		t.Fatalf("join after the grace: %v", err)
	}
	g, err := shiftlock.NewClient(ep2, shiftlock.Config{}).AcquireExclusive(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if g.Token() <= last {
		t.Fatalf("token %d after the restart is not above %d from before it", g.Token(), last)
	}
}

// TestStateDirIsExclusive: two memory nodes on one state directory would
// each start a generation from the same record; the second is refused with
// a reason until the first lets go.
func TestStateDirIsExclusive(t *testing.T) {
	dir := t.TempDir()
	host := memnode.New(open(t, dir, memnode.Config{Entries: 16}))
	if _, err := memnode.Open(dir, memnode.Config{Entries: 16}); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("a second memory node on the same state directory: %v", err)
	}
	host.Close()
	memnode.New(open(t, dir, memnode.Config{Entries: 16})).Close()
}

// TestStateFileWithoutAGenerationIsRefused: every state file a memory node
// writes names its generation, 1 or more. One that parses but names none
// ("{}", a hand edit, another program's file) is not a first start: a
// restart would owe nothing and grant at once what the previous run
// granted. Before, it was read as generation 0 and the node started as
// generation 1 with no grace.
func TestStateFileWithoutAGenerationIsRefused(t *testing.T) {
	for _, content := range []string{`{}`, `{"generation":0,"max_horizon_ms":5000}`, `null`} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "memnode-state.json"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := memnode.Open(dir, memnode.Config{Entries: 16}); err == nil || !strings.Contains(err.Error(), "corrupt state file") {
			t.Fatalf("state file %s: %v, want it refused as corrupt", content, err)
		}
	}
}

// TestSavedHorizonComesDown: once the locks granted under a long horizon
// have run out, the saved horizon follows the members' horizons down, so a
// restart no longer waits for a lease that ended long ago. Before, the
// longest horizon ever confirmed was kept for good.
func TestSavedHorizonComesDown(t *testing.T) {
	dir := t.TempDir()
	base := memnode.Config{Entries: 64, HeartbeatInterval: 50 * time.Millisecond, DeadAfter: 2 * time.Second}
	cfg := open(t, dir, base)
	host, _, ep := joinOne(t, cfg)
	lease := lockmap.NewLease(ep)
	ctx := context.Background()
	if err := lease.Cover(ctx, time.Now().Add(3*time.Second), 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if h := cfg.Store.Get().MaxHorizonMs; h < 3000 {
		t.Fatalf("saved horizon %d ms after a confirmed 3 s lease", h)
	}
	// The proxy leaves; its 3 s grant may still run, and then has.
	lease.Stop()
	host.Leave(ep.Node())
	if h := cfg.Store.Get().MaxHorizonMs; h < 2500 {
		t.Fatalf("saved horizon %d ms right after the member left with a 3 s lease", h)
	}
	deadline := time.Now().Add(15 * time.Second)
	for cfg.Store.Get().MaxHorizonMs > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("saved horizon still %d ms long after every lease ran out", cfg.Store.Get().MaxHorizonMs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	host.Close()
	cfg2 := open(t, dir, base)
	defer memnode.New(cfg2).Close()
	if grace := time.Until(cfg2.GraceUntil); grace > base.DeadAfter {
		t.Fatalf("restart grace %v after every lease ran out, want at most dead_after", grace)
	}
}

// TestSoloRestartOwesOnlyTheHorizon: a proxy's embedded memory node dies
// with its only member, so its next start waits for the saved horizon
// alone, not dead_after on top (a year there).
func TestSoloRestartOwesOnlyTheHorizon(t *testing.T) {
	cfg := memnode.Config{DeadAfter: 365 * 24 * time.Hour, Solo: true}
	_, grace := memnode.NextGeneration(memnode.State{Generation: 3, MaxHorizonMs: 8250}, true, cfg)
	if grace < 8250*time.Millisecond || grace > 8300*time.Millisecond {
		t.Fatalf("solo grace %v for an 8.25 s horizon", grace)
	}
	cfg.Solo = false
	cfg.DeadAfter = time.Second
	if _, grace := memnode.NextGeneration(memnode.State{Generation: 3, MaxHorizonMs: 8250}, true, cfg); grace < 9250*time.Millisecond {
		t.Fatalf("memory node grace %v, want the horizon plus dead_after", grace)
	}
}

// TestClosingSavesOnlyWhatDepartedMembersStillHold: a memory node that
// closes with no member left saves the horizon their last beats published,
// even if that is less than it saved before, so a next generation waits
// for nothing else. A member still joined keeps what it was confirmed.
// Before, a proxy that stopped cleanly right after its horizon came down
// left the higher horizon saved: the embedded memory node's next start
// served nothing for a TTL with nothing held.
func TestClosingSavesOnlyWhatDepartedMembersStillHold(t *testing.T) {
	base := memnode.Config{Entries: 64, HeartbeatInterval: 20 * time.Millisecond, DeadAfter: 2 * time.Second}
	ctx := context.Background()
	for _, stay := range []bool{false, true} {
		cfg := open(t, t.TempDir(), base)
		host := memnode.New(cfg)
		fab := memfab.New(host)
		var hs []*rdma.Heartbeat
		var eps []*memfab.Endpoint
		var horizon [2]atomic.Int64
		for i := range 2 {
			ep, err := fab.Join(string(rune('a' + i)))
			if err != nil {
				t.Fatal(err)
			}
			horizon[i].Store(int64(10 * time.Second))
			hb := rdma.StartExactHeartbeat(ep, func() time.Duration { return time.Duration(horizon[i].Load()) }, nil)
			defer hb.Stop()
			hs, eps = append(hs, hb), append(eps, ep)
		}
		for deadline := time.Now().Add(10 * time.Second); cfg.Store.Get().MaxHorizonMs < 10000; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the 10 s horizons were not saved: %d ms", cfg.Store.Get().MaxHorizonMs)
			}
		}
		// Their locks released, the members publish 300 ms and leave, or
		// one stays with its 10 s; the memory node closes at once.
		for i := range 2 {
			if stay && i == 1 {
				continue
			}
			horizon[i].Store(int64(300 * time.Millisecond))
			if err := hs[i].Push(ctx, 0); err != nil {
				t.Fatal(err)
			}
			host.Leave(eps[i].Node())
		}
		host.Close()
		saved := time.Duration(cfg.Store.Get().MaxHorizonMs) * time.Millisecond
		switch {
		case !stay && saved > time.Second:
			t.Errorf("closed with no member left, whose last beats said 300 ms: saved %v", saved)
		case stay && saved < 10*time.Second:
			t.Errorf("closed with a member still joined on a 10 s horizon: saved %v", saved)
		}
	}
}
