package lockmap

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
)

// TestSavedHorizonAlwaysCoversTheGrants: the memory node lowers its saved
// horizon as the members' horizons come down, and members rely on a horizon
// only once confirmed. Whatever the interleaving, a restart read at any
// instant must wait out every grant the lease covered before that instant.
// Horizons here go up and down every few hundred milliseconds (TTLs from
// 20 ms to 2 s, the longest recent one forgotten after 200 ms), with two
// members, one of which leaves halfway; a sampler reads the saved state as a
// restart would and checks every covered grant against it.
func TestSavedHorizonAlwaysCoversTheGrants(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	cfg, err := memnode.Open(t.TempDir(), memnode.Config{Entries: 64, HeartbeatInterval: 20 * time.Millisecond, DeadAfter: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	host := memnode.New(cfg)
	t.Cleanup(host.Close)
	fab := memfab.New(host)

	var mu sync.Mutex
	var ends []time.Time // ends of covered grants, by when Cover returned
	var covered []time.Time
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, run := range []time.Duration{3 * time.Second, 1500 * time.Millisecond} {
		ep, err := fab.Join(string(rune('a' + i)))
		if err != nil {
			t.Fatal(err)
		}
		ls := NewLease(ep)
		ls.headHold = 200 * time.Millisecond
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			defer func() { ls.Stop(); host.Leave(ep.Node()) }()
			r := rand.New(rand.NewPCG(seed, 1))
			ttls := []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}
			until := time.Now().Add(run)
			for time.Now().Before(until) {
				select {
				case <-stop:
					return
				default:
				}
				ttl := ttls[r.IntN(len(ttls))]
				if r.IntN(4) != 0 {
					ttl = ttls[0] // mostly short: the horizon comes down between the long ones
				}
				end := time.Now().Add(ttl)
				if err := ls.Cover(context.Background(), end, ttl); err != nil {
					t.Error(err)
					return
				}
				now := time.Now()
				mu.Lock()
				ends, covered = append(ends, end), append(covered, now)
				mu.Unlock()
				time.Sleep(time.Duration(r.IntN(30)) * time.Millisecond)
			}
		}(uint64(i + 1))
	}
	checks := 0
	for deadline := time.Now().Add(3500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(3 * time.Millisecond) {
		// A restart now would read this and wait this long from now.
		at := time.Now()
		wait := time.Duration(cfg.Store.Get().MaxHorizonMs) * time.Millisecond
		mu.Lock()
		for i, c := range covered {
			if c.Before(at) && ends[i].After(at.Add(wait)) {
				mu.Unlock()
				close(stop)
				wg.Wait()
				t.Fatalf("a grant covered %v before a restart at this instant ends %v after it, but the saved horizon is %v",
					at.Sub(c), ends[i].Sub(at), wait)
			}
		}
		mu.Unlock()
		checks++
	}
	close(stop)
	wg.Wait()
	if len(ends) < 50 {
		t.Fatalf("only %d grants covered", len(ends))
	}
	t.Logf("%d grants covered, %d restarts checked; saved horizon at the end %d ms", len(ends), checks, cfg.Store.Get().MaxHorizonMs)
}

// TestConfirmationIsNotReusedAfterTheHorizonFell: a lease that had a long
// horizon confirmed, then published shorter ones while the memory node
// lowered its saved horizon, must have the long one confirmed again before
// it relies on it: the old confirmation no longer holds the saved horizon up.
func TestConfirmationIsNotReusedAfterTheHorizonFell(t *testing.T) {
	cfg, ls := leaseOnDisk(t, nil)
	ls.headHold = 100 * time.Millisecond
	ls.floor, ls.margin = 0, 50*time.Millisecond // as a solo lease: nothing holds the horizon up but the grants
	ctx := context.Background()
	const ttl = 1500 * time.Millisecond
	if err := ls.Cover(ctx, time.Now().Add(ttl), ttl); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); cfg.Store.Get().MaxHorizonMs >= 1000; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("saved horizon stayed at %d ms", cfg.Store.Get().MaxHorizonMs)
		}
	}
	if err := ls.Cover(ctx, time.Now().Add(ttl), ttl); err != nil {
		t.Fatal(err)
	}
	if s := time.Duration(cfg.Store.Get().MaxHorizonMs) * time.Millisecond; s < ttl {
		t.Fatalf("a %v grant was covered while the saved horizon is %v: a restart now would grant its lock again", ttl, s)
	}
}

// slowStore is a state directory on a disk (or a CPU) so busy that a save
// takes delay.
type slowStore struct {
	memnode.StateStore
	delay time.Duration
}

func (s slowStore) Update(f func(*memnode.State) bool) error {
	time.Sleep(s.delay)
	return s.StateStore.Update(f)
}

// TestSlowSaveDelaysAGrantButDoesNotRefuseIt: a memory node whose saves
// take 30 heartbeats confirms a longer horizon late, and the grant that
// needs it waits for it. Before, the lease gave up after 10 heartbeats (1 s
// on the defaults), and a client's first lock on a loaded CI machine was
// refused with "ERR lockmap: no lease with the memory node: the memory node
// has not confirmed a 2.25s lease horizon" (itest/redislock010).
func TestSlowSaveDelaysAGrantButDoesNotRefuseIt(t *testing.T) {
	cfg, ls := leaseOnDisk(t, func(st memnode.StateStore) memnode.StateStore { return slowStore{st, 600 * time.Millisecond} })
	const ttl = 1500 * time.Millisecond
	if err := ls.Cover(context.Background(), time.Now().Add(ttl), ttl); err != nil {
		t.Fatalf("a grant while the memory node saves slowly: %v", err)
	}
	if s := time.Duration(cfg.Store.Get().MaxHorizonMs) * time.Millisecond; s < ttl {
		t.Fatalf("a %v grant was covered while the saved horizon is %v", ttl, s)
	}
}

// TestConfirmationComesWhileTheHorizonFalls: a grant that needs a longer
// horizon confirmed pushes a beat with it; the periodic beats after it
// publish less as time passes when no longer TTL holds the horizon up
// (here at once: headHold 0). A memory node that did not observe the
// pushed beat before the next periodic one never confirmed it, and the
// grant was refused after confirmPatience: on a loaded machine, a memory
// node pass that came 100 ms late refused lockmap's TestConfirmationIsNotReused
// AfterTheHorizonFell in CI. Until the confirmation comes, every beat must
// publish what the grant waits for.
func TestConfirmationComesWhileTheHorizonFalls(t *testing.T) {
	_, ls := leaseOnDisk(t, nil)
	ls.mu.Lock()
	ls.headHold = 0 // the horizon falls from the first periodic beat on
	ls.floor, ls.margin = 0, 0
	ls.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Each grant is longer than every earlier one, so each needs its own
	// confirmation; the memory node's pass and the periodic beat race for
	// the moment after each push.
	for i := 0; i < 12; i++ {
		ttl := time.Second + time.Duration(i)*50*time.Millisecond
		if err := ls.Cover(ctx, time.Now().Add(ttl), ttl); err != nil {
			t.Fatalf("grant %d (%v TTL): %v", i, ttl, err)
		}
	}
}

// leaseOnDisk is a lease on a memory node that saves its state in a
// temporary directory, with 20 ms heartbeats; wrap, if set, wraps its store.
func leaseOnDisk(t *testing.T, wrap func(memnode.StateStore) memnode.StateStore) (memnode.Config, *Lease) {
	t.Helper()
	cfg, err := memnode.Open(t.TempDir(), memnode.Config{Entries: 64, HeartbeatInterval: 20 * time.Millisecond, DeadAfter: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		cfg.Store = wrap(cfg.Store)
	}
	host := memnode.New(cfg)
	t.Cleanup(host.Close)
	ep, err := memfab.New(host).Join("p")
	if err != nil {
		t.Fatal(err)
	}
	ls := NewLease(ep)
	t.Cleanup(ls.Stop)
	return cfg, ls
}

// TestTryCover: what an event loop asks of the lease. A grant inside the
// published, confirmed horizon is covered; one past it is refused, with no
// error (Cover then pushes a beat on a goroutine, after which TryCover
// covers the same grant) and with its end recorded, so that the next beat
// covers it; a lost lease or a TTL past MaxLease is an error, as from Cover.
func TestTryCover(t *testing.T) {
	_, ls := leaseOnDisk(t, nil)
	ctx := context.Background()
	const short = time.Second // long enough that the published horizon stays above 0 throughout
	if err := ls.Cover(ctx, time.Now().Add(short), short); err != nil {
		t.Fatal(err)
	}
	at, h := ls.hb.Published()
	if h < short {
		t.Fatalf("Cover returned with a published horizon of %v for a %v grant", h, short)
	}

	if ok, err := ls.TryCover(at.Add(h/2), short); !ok || err != nil {
		t.Fatalf("a grant inside the published horizon %v: covered %v, %v", h, ok, err)
	}
	long := h + time.Second
	end := time.Now().Add(long)
	if ok, err := ls.TryCover(end, long); ok || err != nil {
		t.Fatalf("a grant %v past the published horizon %v: covered %v, %v; want refused, no error", long, h, ok, err)
	}
	ls.mu.Lock()
	recorded := !ls.sticky.Before(end)
	ls.mu.Unlock()
	if !recorded {
		t.Fatal("the refused grant's end was not recorded: the next beat would not cover it")
	}
	if err := ls.Cover(ctx, end, long); err != nil {
		t.Fatal(err)
	}
	if ok, err := ls.TryCover(end, long); !ok || err != nil {
		t.Fatalf("after Cover pushed the horizon: covered %v, %v", ok, err)
	}

	max := ls.ep.Layout().MaxLease
	if max <= 0 {
		t.Fatal("the memory node sets no MaxLease: the TTL check below would test nothing")
	}
	if _, err := ls.TryCover(time.Now().Add(2*max), 2*max); !errors.Is(err, ErrTTLTooLong) {
		t.Errorf("a TTL past MaxLease %v: %v, want ErrTTLTooLong", max, err)
	}
	ls.mu.Lock()
	ls.lost = errors.New("declared dead")
	ls.mu.Unlock()
	if ok, err := ls.TryCover(at.Add(h/2), short); ok || !errors.Is(err, ErrNoLease) {
		t.Fatalf("a lost lease: covered %v, %v; want ErrNoLease", ok, err)
	}
}

// TestRetireCountsOnlyTheGrantsInForce: a retired lease's last beat keeps
// no room for a next grant, however long the recent TTLs, but still covers
// the grants in force: one the Map's expirer holds, and one checked and
// not yet handed to it (pinned). Every grant after it is refused.
func TestRetireCountsOnlyTheGrantsInForce(t *testing.T) {
	ctx := context.Background()
	for _, inForce := range []string{"none", "held", "pinned"} {
		_, ls := leaseOnDisk(t, nil)
		var latest atomic.Int64 // the expirer's latest deadline, Unix ns; 0: none
		ls.trackHolds(func() time.Time {
			if n := latest.Load(); n != 0 {
				return time.Unix(0, n)
			}
			return time.Time{}
		})
		const long = 30 * time.Second
		end := time.Now().Add(long)
		p, err := ls.cover(ctx, end, long, true)
		if err != nil {
			t.Fatal(err)
		}
		latest.Store(end.UnixNano())
		p.unpin()
		latest.Store(0) // released
		ls.mu.Lock()
		room := ls.headTTL
		ls.mu.Unlock()
		if room != long {
			t.Fatalf("after a %v grant the beats keep %v of room; the test needs them to keep the TTL", long, room)
		}

		var want time.Time
		switch inForce {
		case "held":
			want = time.Now().Add(5 * time.Second)
			latest.Store(want.UnixNano())
		case "pinned":
			// In a generation of its own: one that shares the released
			// grant's keeps that deadline until the pin goes, which errs
			// long (safe) for the microseconds a pin lasts.
			if err := ls.hb.Push(ctx, 0); err != nil {
				t.Fatal(err)
			}
			want = time.Now().Add(5 * time.Second)
			if p, ok, err := ls.tryCover(want, 5*time.Second, true); !ok || err != nil {
				t.Fatalf("a 5 s grant under a %v horizon: covered %v, %v", long, ok, err)
			} else {
				defer p.unpin()
			}
		}
		if err := ls.Retire(ctx); err != nil {
			t.Fatal(err)
		}
		at, h := ls.hb.Published()
		if end := at.Add(h); end.Before(want) {
			t.Errorf("%s: the last beat ends %v before the grant in force", inForce, want.Sub(end))
		}
		if floor := ls.floor + ls.margin; h > max(time.Until(want)+ls.margin, floor)+time.Second {
			t.Errorf("%s: the last beat publishes %v: room for grants that will not come", inForce, h)
		}
		if _, ok, err := ls.tryCover(time.Now().Add(time.Second), time.Second, true); ok || !errors.Is(err, ErrDraining) {
			t.Errorf("%s: a grant after Retire: covered %v, %v; want ErrDraining", inForce, ok, err)
		}
	}
}
