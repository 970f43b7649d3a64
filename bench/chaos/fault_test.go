package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// faultTopology starts a memnode and two proxies behind toxiproxy links.
func faultTopology(t *testing.T) (*topology, []*redis.Client, Config) {
	t.Helper()
	cfg := campaignConfig(t)
	cfg.Proxies = 2
	cfg.defaults()
	topo, err := newTopology(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(topo.stop)
	if err := topo.start(); err != nil {
		t.Fatal(err)
	}
	var cs []*redis.Client
	for _, pp := range topo.proxies {
		c := redis.NewClient(&redis.Options{Addr: addr(pp.respPort), MaxRetries: -1, ReadTimeout: 10 * time.Second})
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return topo, cs, cfg
}

func acquire(ctx context.Context, c *redis.Client, key, token string, ttl, wait time.Duration) (uint64, error) {
	return c.Do(ctx, "LOCK.ACQUIRE", key, token, "PX", ttl.Milliseconds(), "WAIT", wait.Milliseconds()).Uint64()
}

// acquireWithin retries until the lock is granted or d has passed.
func acquireWithin(t *testing.T, c *redis.Client, key, token string, d time.Duration) (uint64, time.Duration) {
	t.Helper()
	start := time.Now()
	var last error
	for time.Since(start) < d {
		f, err := acquire(context.Background(), c, key, token, 10*time.Second, time.Second)
		if err == nil {
			return f, time.Since(start)
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s not granted within %v; last error: %v", key, d, last)
	return 0, 0
}

// TestKillHolderProxy: kill -9 of a proxy holding a lock with a waiter on
// another proxy. The waiter gets the lock after the dead proxy's lease
// horizon, within the recovery bound, with a larger fence.
func TestKillHolderProxy(t *testing.T) {
	topo, cs, cfg := faultTopology(t)
	ctx := context.Background()
	sent := time.Now() // the victim's TTL starts after this
	f1, err := acquire(ctx, cs[0], "k", "victim", cfg.TTL, 0)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	topo.proxies[0].p.Kill()
	f2, took := acquireWithin(t, cs[1], "k", "survivor", 2*cfg.recoveryBound())
	t.Logf("granted %v after the kill (bound %v), fence %d after %d", time.Since(killed).Round(time.Millisecond), cfg.recoveryBound(), f2, f1)
	if f2 <= f1 {
		t.Fatalf("fence %d after recovery is not above %d", f2, f1)
	}
	if took > cfg.recoveryBound() {
		// A measurement (see everyKind): too early would be the failure.
		t.Logf("recovery took %v, beyond %v", took, cfg.recoveryBound())
	}
	if since := time.Since(sent); since < cfg.TTL {
		t.Fatalf("granted %v after the victim asked, before its TTL of %v could have run out", since, cfg.TTL)
	}
}

// TestMemnodeRestart: the memnode dies and comes back from its state
// directory. Proxies rejoin after the restart grace; locks held before are
// gone and reported so; new fences are above every old one.
func TestMemnodeRestart(t *testing.T) {
	topo, cs, cfg := faultTopology(t)
	ctx := context.Background()
	f1, err := acquire(ctx, cs[0], "r", "before", cfg.TTL, 0)
	if err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	topo.mem.Kill()
	time.Sleep(200 * time.Millisecond)
	if err := topo.startMemnode(); err != nil {
		t.Fatal(err)
	}
	// During the grace, nothing may be granted: the old lock's TTL still runs.
	if _, err := acquire(ctx, cs[1], "r", "during", cfg.TTL, 0); err == nil && time.Since(restarted) < cfg.TTL {
		t.Fatal("granted during the restart grace, while the old holder's TTL still ran")
	}
	if testing.Verbose() {
		defer func() {
			if t.Failed() {
				t.Logf("proxy 1:\n%s\nmemnode:\n%s", tail(topo.proxies[1].p.Output(), 40), tail(topo.mem.Output(), 20))
			}
		}()
	}
	f2, took := acquireWithin(t, cs[1], "r", "after", 30*time.Second)
	t.Logf("granted %v after the restart; fence %d, before it %d", took.Round(time.Millisecond), f2, f1)
	if f2 <= f1 {
		t.Fatalf("fence %d after the restart is not above %d", f2, f1)
	}
	if time.Since(restarted) < cfg.TTL {
		t.Fatal("granted before the old lock's TTL could have run out")
	}
	// The proxy that held the old lock no longer claims it.
	if v, err := cs[0].Get(ctx, "r").Result(); err == nil && v == "before" {
		t.Fatal("the old holder's proxy still reports the pre-restart lock")
	}
}

// TestPausedProxy: a proxy stopped (SIGSTOP) for longer than dead_after is
// fenced; another proxy gets its lock only after the paused holder's TTL; on
// waking it rejoins and no longer reports the lock as held.
func TestPausedProxy(t *testing.T) {
	topo, cs, cfg := faultTopology(t)
	ctx := context.Background()
	sent := time.Now()
	if _, err := acquire(ctx, cs[0], "p", "sleeper", cfg.TTL, 0); err != nil {
		t.Fatal(err)
	}
	topo.proxies[0].p.Signal(syscall.SIGSTOP)
	_, _ = acquireWithin(t, cs[1], "p", "waker", 2*cfg.recoveryBound())
	if since := time.Since(sent); since < cfg.TTL {
		t.Fatalf("granted %v after the paused holder's request, inside its %v TTL", since, cfg.TTL)
	}
	topo.proxies[0].p.Signal(syscall.SIGCONT)
	// On waking it must not claim the lock: an error (lost) or the other holder.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		v, err := cs[0].Get(ctx, "p").Result()
		if err != nil && strings.Contains(err.Error(), "LOCKLOST") {
			return
		}
		if err == nil && v != "sleeper" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the paused proxy still reports the lock it lost")
}

// TestPartitionFromMemnode: cut proxy 0 from the memnode. It fences itself
// (TRYAGAIN, lease lost in LOCK.INFO) instead of granting, and serves again
// after the link heals, having rejoined.
func TestPartitionFromMemnode(t *testing.T) {
	topo, cs, cfg := faultTopology(t)
	ctx := context.Background()
	if _, err := acquire(ctx, cs[0], "q", "t", cfg.TTL, 0); err != nil {
		t.Fatal(err)
	}
	link := topo.links["mem-0"]
	link.Stop()
	time.Sleep(cfg.DeadAfter)
	info, err := cs[0].Do(ctx, "LOCK.INFO", "q").Result()
	if err != nil || !strings.Contains(fmt.Sprint(info), "lease:lost") {
		t.Fatalf("LOCK.INFO during the partition: %v %v", info, err)
	}
	_, err = acquire(ctx, cs[0], "other", "t", cfg.TTL, 0)
	if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Fatalf("acquire while partitioned: %v, want TRYAGAIN", err)
	}
	if err := link.Start(); err != nil {
		t.Fatal(err)
	}
	acquireWithin(t, cs[0], "other", "t2", 15*time.Second)
}

// TestPeerPartition: cut the handover link into proxy 1 while its client is
// queued behind proxy 0's holder. The handover cannot be delivered; the
// queue is recovered and the lock is not lost for good.
func TestPeerPartition(t *testing.T) {
	topo, cs, cfg := faultTopology(t)
	ctx := context.Background()
	if _, err := acquire(ctx, cs[0], "h", "holder", 10*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := acquire(ctx, cs[1], "h", "queued", 10*time.Second, 5*time.Second)
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	topo.links["peer-1"].Stop()
	cs[0].Do(ctx, "LOCK.RELEASE", "h", "holder")
	err := <-done
	t.Logf("queued acquire across a cut handover link: %v", err)
	if err := topo.links["peer-1"].Start(); err != nil {
		t.Fatal(err)
	}
	// Whatever happened to that waiter, the lock must come back to life.
	acquireWithin(t, cs[0], "h", "later", 2*cfg.recoveryBound()+10*time.Second)
	if errors.Is(err, context.Canceled) {
		t.Fatal("unexpected cancellation")
	}
}

func tail(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
