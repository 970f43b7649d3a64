package itest

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestDrainOnSIGTERM: a proxy told to stop while a client holds a lock and
// another is queued for it turns not ready, refuses new connections and new
// acquires, lets the holder release, hands the lock to the queued client,
// and leaves (exit 0) only once that client has released too.
func TestDrainOnSIGTERM(t *testing.T) {
	p := testproc.Proxy(t, "-metrics", "127.0.0.1:0", "-acquire-wait", "30s")
	maddr := metricsAddr(t, p)
	ctx := ctxT(t, time.Minute)
	holder := redis.NewClient(&redis.Options{Addr: p.Addr, PoolSize: 1, MaxRetries: -1, ReadTimeout: time.Minute})
	waiter := redis.NewClient(&redis.Options{Addr: p.Addr, PoolSize: 1, MaxRetries: -1, ReadTimeout: time.Minute})
	t.Cleanup(func() { holder.Close(); waiter.Close() })
	if ok, err := holder.SetNX(ctx, "k", "h", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("holder: %v %v", ok, err)
	}
	if err := waiter.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	queued := setNXLater(ctx, waiter, "k", "w", time.Minute)
	awaitInfo(t, holder, "blocked_clients:1")

	p.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + maddr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz stayed ready after SIGTERM")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A new connection is turned away with an error clients retry.
	if line := dialRaw(t, p.Addr).read(); !strings.HasPrefix(line, "-TRYAGAIN") || !strings.Contains(line, "shutting down") {
		t.Fatalf("new connection while draining got %q", line)
	}
	// A connected client may not acquire anything new...
	if err := holder.SetNX(ctx, "other", "h", time.Minute).Err(); err == nil || !isTryAgain(err) {
		t.Fatalf("acquire while draining: %v; want TRYAGAIN", err)
	}
	// ...but releases, and the queued acquire is handed the lock.
	if n, err := redis.NewScript(casDelete).Run(ctx, holder, []string{"k"}, "h").Int(); n != 1 || err != nil {
		t.Fatalf("release while draining: %d %v", n, err)
	}
	if err := <-queued; err != nil {
		t.Fatalf("the queued acquire while draining: %v; want OK", err)
	}
	if p.Exited() {
		t.Fatal("the proxy left while a client still held a lock through it")
	}
	if n, err := redis.NewScript(casDelete).Run(ctx, waiter, []string{"k"}, "w").Int(); n != 1 || err != nil {
		t.Fatalf("second release while draining: %d %v", n, err)
	}
	waitExit(t, p, 30*time.Second)
	if !strings.Contains(p.Output(), "drained") {
		t.Fatalf("no drained line in the log:\n%s", p.Output())
	}
}

// TestDrainTimeout: a lock nobody releases holds the shutdown for at most
// drain_timeout.
func TestDrainTimeout(t *testing.T) {
	p := testproc.Proxy(t, "-drain-timeout", "500ms")
	c := client(t, p.Addr)
	if ok, err := c.SetNX(ctxT(t, 10*time.Second), "k", "h", time.Hour).Result(); !ok || err != nil {
		t.Fatalf("SetNX: %v %v", ok, err)
	}
	p.Signal(syscall.SIGTERM)
	waitExit(t, p, 30*time.Second)
	if !strings.Contains(p.Output(), "drain timeout") {
		t.Fatalf("no drain timeout line in the log:\n%s", p.Output())
	}
}

func waitExit(t *testing.T, p *testproc.Proc, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !p.Exited() {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy did not exit within %v:\n%s", d, p.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLockLeftHeldByAStoppedProxyIsWaitedOut: a proxy on a shared memory
// node that stops with a lock still held (drain_timeout 0) leaves with a
// last beat that counts that lock (lockmap.Lease.Retire drops only the
// room for grants to come): another proxy's client is granted the key only
// after its TTL, and sooner than the room of the 30 s TTL used just before
// (released) would have allowed.
func TestLockLeftHeldByAStoppedProxyIsWaitedOut(t *testing.T) {
	mn := testproc.Memnode(t)
	pa := testproc.Proxy(t, "-memnode", mn.Addr, "-drain-timeout", "0")
	pb := testproc.Proxy(t, "-memnode", mn.Addr)
	a, b := client(t, pa.Addr), client(t, pb.Addr)
	ctx := ctxT(t, time.Minute)
	const long = 30 * time.Second
	longSent := time.Now()
	if ok, err := a.SetNX(ctx, "long", "a", long).Result(); !ok || err != nil {
		t.Fatalf("SET long NX: %v %v", ok, err)
	}
	if n, err := a.Del(ctx, "long").Result(); n != 1 || err != nil {
		t.Fatalf("DEL long: %v %v", n, err)
	}
	const ttl = 4 * time.Second
	sent := time.Now()
	if ok, err := a.SetNX(ctx, "k", "a", ttl).Result(); !ok || err != nil {
		t.Fatalf("SET k NX: %v %v", ok, err)
	}
	if err := pa.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	_, grantedBy := untilGranted(t, time.Now().Add(45*time.Second), anyError, func() (uint64, error) {
		return b.Do(ctx, "LOCK.ACQUIRE", "k", "b", "PX", ttl.Milliseconds(), "WAIT", 100).Uint64()
	})
	if early := sent.Add(ttl).Sub(grantedBy); early > 0 {
		t.Fatalf("granted k through another proxy %v before the stopped proxy's lock could have run out", early)
	}
	// The released lock, and the room kept for the next one of its TTL,
	// must not count: before, k came 26 s after its TTL, with long's.
	if late := grantedBy.Sub(longSent.Add(long)); late > 0 {
		t.Fatalf("k was granted only %v after the released %v lock's deadline: the stopped proxy's last beat kept room for grants to come", late, long)
	}
	t.Logf("granted %v after the stopped proxy's lock ran out", grantedBy.Sub(sent.Add(ttl)).Round(time.Millisecond))
}
