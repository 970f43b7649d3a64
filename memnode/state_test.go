package memnode_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

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
	cfg, err := memnode.Open(dir, base)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Generation != 1 || !cfg.GraceUntil.IsZero() {
		t.Fatalf("first start: generation %d, grace until %v", cfg.Generation, cfg.GraceUntil)
	}
	host := memnode.New(cfg)
	ep, err := memfab.New(host).Join("p")
	if err != nil {
		t.Fatal(err)
	}
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
	time.Sleep(1500 * time.Millisecond) // one high-water scan (every second, on a beat tick)
	lease.Stop()
	host.Close() // the process dies: the table is gone

	opened := time.Now()
	cfg2, err := memnode.Open(dir, base)
	if err != nil {
		t.Fatal(err)
	}
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
