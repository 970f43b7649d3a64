package fisslock_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shiftlock/shiftlock-proxy/bench/shiftlock/baseline/fisslock"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
	"github.com/shiftlock/shiftlock-proxy/shiftlock/locktest"
)

func lockers(c *fisslock.Cluster, nodes int) []shiftlock.Locker {
	ls := make([]shiftlock.Locker, nodes)
	for i := range ls {
		ls[i] = c.Node(i)
	}
	return ls
}

// TestMutualExclusion runs the checker over the switch path, the fallback
// path and both together, with and without link latency (which reorders
// packets across links, as the incarnation check must survive), with some
// requests abandoned while they wait. Afterwards nothing may be held or
// queued anywhere.
func TestMutualExclusion(t *testing.T) {
	const nodes = 4
	for _, capName := range []string{"switch", "fallback", "mixed"} {
		for _, hop := range []time.Duration{0, 30 * time.Microsecond} {
			for _, sh := range []struct {
				entries int
				zipf    float64
			}{{3, 0}, {500, 1.2}} {
				t.Run(fmt.Sprintf("%s/hop=%v/entries=%d", capName, hop, sh.entries), func(t *testing.T) {
					cfg := fisslock.Config{Nodes: nodes, Entries: uint64(sh.entries), Hop: hop}
					switch capName {
					case "switch":
						cfg.Capacity = cfg.Entries
					case "mixed":
						cfg.Capacity = cfg.Entries / 2
					}
					c := fisslock.New(cfg)
					chk := locktest.NewChecker(sh.entries)
					chk.NoTokens = true
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					res, err := locktest.Run(ctx, locktest.Workload{
						Clients: lockers(c, nodes), Workers: 64, Entries: sh.entries, ReadRatio: 0.6,
						Zipf: sh.zipf, Ops: 80, Duration: time.Second, CancelRatio: 0.02, Seed: 3,
					}, chk)
					if err != nil {
						t.Fatal(err)
					}
					if v := chk.Violations(); v != 0 {
						t.Fatalf("%d violations: %v", v, chk.Report())
					}
					if res.Ops == 0 {
						t.Fatal("no acquisitions completed")
					}
					time.Sleep(100 * time.Millisecond) // abandoned grants and the last packets settle
					c.Close()
					if err := c.Idle(); err != nil {
						t.Error(err)
					}
					s := c.Stats()
					t.Logf("%d cycles (%d abandoned); switch grants %d, agent grants %d, fallback %d (%d local), transfers %d, bounces %d, refused %d",
						res.Ops, res.Abandoned, s.SwitchGrants.Load(), s.AgentGrants.Load(), s.Fallback.Load(), s.FallbackLocal.Load(),
						s.Transfers.Load(), s.Bounces.Load(), s.Refused.Load())
				})
			}
		}
	}
}

// TestBrokenIncarnationIsCaught shows the checker run is not vacuous: a
// switch that frees a shared lock while one of its own shared grants has not
// yet reached the agent lets a writer in beside that reader.
func TestBrokenIncarnationIsCaught(t *testing.T) {
	const nodes = 4
	var violations uint64
	for attempt := 0; attempt < 5 && violations == 0; attempt++ {
		c := fisslock.New(fisslock.Config{Nodes: nodes, Entries: 2, Capacity: 2, Hop: 50 * time.Microsecond})
		c.BreakIncarnation()
		chk := locktest.NewChecker(2)
		chk.NoTokens = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := locktest.Run(ctx, locktest.Workload{
			Clients: lockers(c, nodes), Workers: 64, Entries: 2, ReadRatio: 0.8,
			Ops: 300, Duration: time.Second, Hold: 20 * time.Microsecond, Seed: uint64(attempt),
		}, chk)
		cancel()
		if err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		violations = chk.Violations()
		c.Close()
	}
	if violations == 0 {
		t.Fatal("the checker missed a switch without incarnation checks")
	}
	t.Logf("caught %d violations", violations)
}

// TestGrantTimes checks the model's timing on the fake clock: a grant the
// switch decides costs a round trip to the switch and its budget, and no
// server; a fallback lock costs the lock manager's CPU, plus two round trips
// through the switch when it is on another machine.
func TestGrantTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hop, sw, srv = time.Microsecond, 100 * time.Nanosecond, 700 * time.Nanosecond
		c := fisslock.New(fisslock.Config{Nodes: 2, Entries: 10, Capacity: 4, Hop: hop, SwitchPacket: sw, ServerPacket: srv})
		defer c.Close()
		ctx := context.Background()
		timed := func(node int, lid uint64, m shiftlock.Mode) (shiftlock.Grant, time.Duration) {
			t0 := time.Now()
			g, err := c.Node(node).Acquire(ctx, lid, m)
			if err != nil {
				t.Fatal(err)
			}
			return g, time.Since(t0)
		}
		for _, tc := range []struct {
			name string
			node int
			lid  uint64
			want time.Duration
		}{
			{"switch", 0, 1, 2*hop + sw},
			{"fallback on this machine", 0, 4, srv}, // lock 4's manager is machine 0
			{"fallback elsewhere", 0, 5, 2*(2*hop+sw) + srv},
		} {
			g, d := timed(tc.node, tc.lid, shiftlock.Exclusive)
			if d != tc.want {
				t.Errorf("%s: grant took %v, want %v", tc.name, d, tc.want)
			}
			_ = g.Release(ctx)
			time.Sleep(time.Millisecond)
		}
		// A second reader is granted by the switch while the first holds,
		// and its release goes to the first reader's machine, which holds the agent.
		g1, _ := timed(0, 2, shiftlock.Shared)
		g2, d := timed(1, 2, shiftlock.Shared)
		if d != 2*hop+sw {
			t.Errorf("shared grant beside a reader took %v, want %v", d, 2*hop+sw)
		}
		// A writer queues at the agent and is handed the lock and the agent
		// when both readers have left.
		done := make(chan time.Duration)
		go func() { _, d := timed(1, 2, shiftlock.Exclusive); done <- d }()
		time.Sleep(10 * time.Microsecond)
		_ = g2.Release(ctx)
		_ = g1.Release(ctx)
		<-done
		time.Sleep(time.Millisecond)
		if s := c.Stats(); s.Transfers.Load() != 1 {
			t.Errorf("transfers %d, want 1", s.Transfers.Load())
		}
	})
}
