package lockmap

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rangelock"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// leasedMap is a Map on a memory node that saves its state in a temporary
// directory (20 ms heartbeats, leases up to 2 h, rangeBytes of range
// trees), with a lease that keeps room for the next hour-long grant for
// 300 ms instead of 10 s.
func leasedMap(t *testing.T, rangeBytes uint64) (memnode.Config, *Lease, *Map) {
	t.Helper()
	cfg, err := memnode.Open(t.TempDir(), memnode.Config{Entries: 1 << 10, HeartbeatInterval: 20 * time.Millisecond, DeadAfter: 2 * time.Second,
		MaxLease: 2 * time.Hour, RangeBytes: rangeBytes, RangeTreeBytes: RangeTreeBytes()})
	if err != nil {
		t.Fatal(err)
	}
	host := memnode.New(cfg)
	t.Cleanup(host.Close)
	ep, err := memfab.New(host).Join("proxy")
	if err != nil {
		t.Fatal(err)
	}
	lease := NewLease(ep)
	lease.longHold = 300 * time.Millisecond
	t.Cleanup(lease.Stop)
	m := New([]*Domain{{Name: "m", Client: shiftlock.NewClient(ep, shiftlock.Config{}), Lease: lease}}, Config{})
	t.Cleanup(m.Close)
	return cfg, lease, m
}

// told is a lock a client was told it holds, from when until it let go
// (zero while it still holds it), and when it ends.
type told struct {
	at, end time.Time
	gone    time.Time
}

// TestReleasedLocksStopHoldingUpARestart: a memory node that keeps state
// (a memnode process, or an embedded proxy's state directory) saves a lease
// horizon that a restart waits out. It must cover every lock a client
// still believes it holds, and only those: before, the horizon only ever
// came down as deadlines passed, so one lock of an hour, released at once,
// had a restart serve nothing for that hour (a day's lock on an embedded
// proxy, a day).
//
// Clients here take keys with TTLs from 20 ms to 2 s, now and then an
// hour, extend some, release most at random, through a Map as the proxy
// does; a sampler reads the saved state as a restart would, every few
// milliseconds, and checks it against every lock told and not let go. Then
// every hour-long lock is released, and the saved horizon must come down
// to the longest lock still held once the room kept for the next such
// grant (longHold, 10 s, here 300 ms) has lapsed.
func TestReleasedLocksStopHoldingUpARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	cfg, _, m := leasedMap(t, 0)

	var mu sync.Mutex
	var locks []*told
	type hour struct {
		key, token string
		l          *told
	}
	var hourly []hour
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w)+1, 7))
			ttls := []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}
			ctx := context.Background()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key, token := fmt.Sprintf("k%d-%d", w, r.IntN(8)), fmt.Sprintf("t%d-%d", w, i)
				ttl := ttls[r.IntN(len(ttls))]
				long := r.IntN(40) == 0
				if long {
					ttl = time.Hour
				}
				_, ok, err := m.AcquireKey(ctx, key, token, AcquireOptions{TTL: ttl})
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					continue
				}
				// The lock ends no later than its deadline from before
				// the acquire; the client believes it from here on.
				l := &told{at: time.Now(), end: time.Now().Add(ttl)}
				mu.Lock()
				locks = append(locks, l)
				if long {
					hourly = append(hourly, hour{key, token, l})
				}
				mu.Unlock()
				if long {
					continue // released at the end
				}
				time.Sleep(time.Duration(r.IntN(15)) * time.Millisecond)
				switch r.IntN(4) {
				case 0: // held until it runs out
				case 1:
					if ok, err := m.Extend(ctx, key, token, 3*time.Second); err != nil {
						t.Error(err)
						return
					} else if ok {
						mu.Lock()
						l.end = time.Now().Add(3 * time.Second)
						mu.Unlock()
					}
					fallthrough
				default:
					mu.Lock()
					l.gone = time.Now() // believed until the release is sent
					mu.Unlock()
					m.Release(key, token)
				}
			}
		}()
	}

	check := func(at time.Time) {
		t.Helper()
		wait := time.Duration(cfg.Store.Get().MaxHorizonMs) * time.Millisecond
		mu.Lock()
		defer mu.Unlock()
		for _, l := range locks {
			if l.at.Before(at) && (l.gone.IsZero() || l.gone.After(at)) && l.end.After(at.Add(wait)) {
				t.Fatalf("a lock told %v before a restart at this instant, not let go, ends %v after it, but the saved horizon is %v",
					at.Sub(l.at), l.end.Sub(at), wait)
			}
		}
	}
	checks := 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(3 * time.Millisecond) {
		check(time.Now())
		checks++
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	n, long := len(locks), len(hourly)
	mu.Unlock()
	if n < 100 || long == 0 {
		t.Fatalf("%d locks told, %d of an hour: too few to test anything", n, long)
	}
	if h := time.Duration(cfg.Store.Get().MaxHorizonMs) * time.Millisecond; h < time.Hour {
		t.Fatalf("with %d locks of an hour held, the saved horizon is %v", long, h)
	}

	// Let go of the hour-long locks: what is left ends within seconds.
	for _, l := range hourly {
		mu.Lock()
		l.l.gone = time.Now()
		mu.Unlock()
		if !m.Release(l.key, l.token) {
			t.Fatalf("releasing %s: not held", l.key)
		}
	}
	released := time.Now()
	for {
		check(time.Now())
		h := time.Duration(cfg.Store.Get().MaxHorizonMs) * time.Millisecond
		if h < time.Minute {
			t.Logf("%d locks told, %d of an hour; %d restarts checked; saved horizon %v, %v after the long locks were released",
				n, long, checks, h, time.Since(released).Round(time.Millisecond))
			return
		}
		if time.Since(released) > 20*time.Second {
			t.Fatalf("20 s after every lock of an hour was released, the saved horizon is still %v: a restart would serve nothing for that long", h)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReleasedSpansStopHoldingUpARestart: a range lock's span counts in
// the lease horizon while it is held, and stops counting once released,
// as a key's lock does. Before, a span's deadline counted until it passed:
// a span of an hour, released at once, held up a restart (and, on a shared
// memory node, the recovery of a dead proxy's entries) for the hour.
func TestReleasedSpansStopHoldingUpARestart(t *testing.T) {
	cfg, lease, m := leasedMap(t, RangeTreeBytes())
	ctx := context.Background()

	if _, ok, err := m.RangeAcquire(ctx, "r", "a", 0, 10, rangelock.Exclusive, time.Hour, time.Second); !ok || err != nil {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	granted := time.Now()
	saved := func() time.Duration { return time.Duration(cfg.Store.Get().MaxHorizonMs) * time.Millisecond }
	// Held past the room: the span alone keeps the horizon.
	time.Sleep(time.Second)
	if at, h := lease.hb.Published(); at.Add(h).Before(granted.Add(time.Hour)) {
		t.Fatalf("a beat %v after the span's grant publishes %v: short of the hour it is held", time.Since(at), h)
	}
	if !m.RangeRelease("r", "a", 0, 10) {
		t.Fatal("release")
	}
	released := time.Now()
	for saved() > time.Minute {
		if time.Since(released) > 20*time.Second {
			_, h := lease.hb.Published()
			t.Fatalf("20 s after the hour's span was released, the beats publish %v and a restart would wait %v", h, saved())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the saved horizon fell to %v within %v of the release", saved(), time.Since(released).Round(time.Millisecond))
}
