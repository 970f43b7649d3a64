package lockmap

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rangelock"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// pauseExpirer stops m's expiry goroutine, as a loaded process delays it,
// and returns a function that starts it again.
func pauseExpirer(m *Map) (resume func()) {
	e := m.exp
	e.stop()
	return func() {
		e.quit, e.done = make(chan struct{}), make(chan struct{})
		go e.run()
	}
}

func soloMap(t *testing.T) *Map {
	return soloMapCfg(t, memnode.Config{Entries: 1 << 10, DeadAfter: time.Hour})
}

// soloMapCfg is a map on a memory node of its own, configured as cfg.
func soloMapCfg(t *testing.T, cfg memnode.Config) *Map {
	t.Helper()
	host := memnode.New(cfg)
	t.Cleanup(host.Close)
	ep, err := memfab.New(host).Join("p")
	if err != nil {
		t.Fatal(err)
	}
	m := New([]*Domain{{Name: "m", Client: shiftlock.NewClient(ep, shiftlock.Config{})}}, Config{})
	t.Cleanup(m.Close)
	return m
}

// TestTTLEndsAtItsDeadlineWhateverTheTimers: a hold is gone for every command
// at the instant of its deadline, even while the expirer has not run (a
// loaded process runs timers late). Before, PEXPIRE and the extend script
// revived a lock that was already past its TTL, GET still showed it and a
// release still released it.
func TestTTLEndsAtItsDeadlineWhateverTheTimers(t *testing.T) {
	ctx := context.Background()
	for _, op := range []string{"extend", "extend-any", "release", "delete", "lookup", "persist", "reacquire-other", "reacquire-same"} {
		t.Run(op, func(t *testing.T) {
			m := soloMap(t)
			resume := pauseExpirer(m)
			if _, ok, err := m.AcquireKey(ctx, "k", "a", AcquireOptions{TTL: 5 * time.Millisecond}); !ok || err != nil {
				t.Fatalf("acquire: %v %v", ok, err)
			}
			time.Sleep(10 * time.Millisecond) // past the deadline; no timer ran
			switch op {
			case "extend":
				if ok, err := m.Extend(ctx, "k", "a", time.Second); ok || err != nil {
					t.Fatalf("extend of an expired hold: %v %v, want false", ok, err)
				}
			case "extend-any": // PEXPIRE
				if ok, err := m.Extend(ctx, "k", "", time.Second); ok || err != nil {
					t.Fatalf("PEXPIRE of an expired hold: %v %v, want false", ok, err)
				}
			case "release":
				if m.Release("k", "a") {
					t.Fatal("released a hold past its TTL")
				}
			case "delete":
				if n := m.Delete("k"); n != 0 {
					t.Fatalf("DEL counted %d holds past their TTL", n)
				}
			case "persist":
				if m.Persist("k") {
					t.Fatal("PERSIST kept a hold past its TTL")
				}
			case "reacquire-other", "reacquire-same":
				tok := "b"
				if op == "reacquire-same" {
					tok = "a"
				}
				// The lock entry is passed on once the expirer runs; a
				// waiter with a budget gets it then.
				done := make(chan bool, 1)
				go func() {
					_, ok, _ := m.AcquireKey(ctx, "k", tok, AcquireOptions{TTL: time.Second, Wait: 5 * time.Second})
					done <- ok
				}()
				time.Sleep(5 * time.Millisecond)
				resume()
				if !<-done {
					t.Fatalf("%s was not granted the key after its TTL ran out", tok)
				}
				in, _ := m.Lookup(ctx, "k")
				if in.State != HeldHere || in.Holders[0].Token != tok {
					t.Fatalf("after re-acquire: %+v", in)
				}
				return
			}
			in, err := m.Lookup(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if len(in.Holders) != 0 {
				t.Fatalf("Lookup shows a hold past its TTL: %+v", in.Holders)
			}
			// The expirer still releases the lock entry; a waiter gets it.
			resume()
			if _, ok, err := m.AcquireKey(ctx, "k", "c", AcquireOptions{TTL: time.Second, Wait: 5 * time.Second}); !ok || err != nil {
				t.Fatalf("key not free after the expirer ran: %v %v", ok, err)
			}
		})
	}
}

// TestLookupTTLIsNeverZeroForALiveHold: Holder.TTL 0 means "no TTL", so a
// hold in force reports a positive remainder however close its deadline.
func TestLookupTTLIsNeverZeroForALiveHold(t *testing.T) {
	m := soloMap(t)
	if _, ok, _ := m.AcquireKey(context.Background(), "k", "a", AcquireOptions{TTL: time.Hour}); !ok {
		t.Fatal("not acquired")
	}
	in, _ := m.Lookup(context.Background(), "k")
	if in.Holders[0].TTL <= 0 || in.Holders[0].TTL > time.Hour {
		t.Fatalf("TTL %v", in.Holders[0].TTL)
	}
}

// TestRangeTTLEndsAtItsDeadline: a range lock past its TTL is gone for
// LOCK.RANGE.RELEASE and LOCK.RANGE.INFO, whatever its timer is doing.
func TestRangeTTLEndsAtItsDeadline(t *testing.T) {
	m := soloMapCfg(t, memnode.Config{Entries: 1 << 10, DeadAfter: time.Hour, RangeBytes: RangeTreeBytes()})
	ctx := context.Background()
	if _, ok, err := m.RangeAcquire(ctx, "r", "a", 0, 10, rangelock.Exclusive, time.Hour, time.Second); !ok || err != nil {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	// Its deadline passes with the timer still set for an hour: as if the
	// timer ran late.
	m.rng.mu.Lock()
	rn := m.rng.names["r"]
	m.rng.mu.Unlock()
	rn.mu.Lock()
	rn.holds[0].deadline = time.Now().Add(-time.Millisecond)
	rn.mu.Unlock()
	in, err := m.RangeLookup("r")
	if err != nil || len(in.Holders) != 0 {
		t.Fatalf("RangeLookup shows a span past its TTL: %+v %v", in.Holders, err)
	}
	if m.RangeRelease("r", "a", 0, 10) {
		t.Fatal("released a span past its TTL")
	}
	// The span was let go: another token gets it at once.
	if _, ok, err := m.RangeAcquire(ctx, "r", "b", 0, 10, rangelock.Exclusive, time.Second, time.Second); !ok || err != nil {
		t.Fatalf("span not free after its TTL: %v %v", ok, err)
	}
}

// TestLatestBoundsEveryScheduledHold: what a lease publishes for the holds
// in force is no earlier than any scheduled hold's deadline, and less than a
// second later than the latest of them (zero with none), through random
// schedules, moves and removals, in the same second and across many.
func TestLatestBoundsEveryScheduledHold(t *testing.T) {
	e := newExpirer(func(*hold, time.Time) {})
	defer e.stop()
	r := rand.New(rand.NewPCG(3, 4))
	base := time.Now().Add(time.Hour) // nothing fires
	var holds []*hold
	for i := range 20000 {
		switch op := r.IntN(10); {
		case op < 5 || len(holds) == 0:
			h := &hold{expIdx: -1}
			holds = append(holds, h)
			e.add(h, base.Add(time.Duration(r.IntN(5000))*time.Millisecond))
		case op < 7:
			e.add(holds[r.IntN(len(holds))], base.Add(time.Duration(r.IntN(5000))*time.Millisecond))
		default:
			j := r.IntN(len(holds))
			e.remove(holds[j])
			holds = slices.Delete(holds, j, j+1)
		}
		var want time.Time
		for _, h := range holds {
			if h.expAt.After(want) {
				want = h.expAt
			}
		}
		got := e.latest()
		switch {
		case want.IsZero() != got.IsZero():
			t.Fatalf("op %d: latest %v with %d holds scheduled", i, got, len(holds))
		case got.Before(want):
			t.Fatalf("op %d: latest is %v before the latest deadline", i, want.Sub(got))
		case got.Sub(want) >= time.Second:
			t.Fatalf("op %d: latest is %v past the latest deadline", i, got.Sub(want))
		}
	}
	if len(e.ends.secs) > 2*e.ends.live+64 {
		t.Fatalf("%d buckets kept for %d in use", len(e.ends.secs), e.ends.live)
	}
}
