package itest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestMemnodeRefusesToStartWithoutState: a memory node process without a
// state directory (or etcd) would, after a restart, grant at once what its
// previous run granted, with fences from 1. It refuses to start and says how
// to fix it. Before, it started and logged nothing.
func TestMemnodeRefusesToStartWithoutState(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	out, err := exec.CommandContext(ctx, testproc.Bin(t, "memnode"), "-listen", "127.0.0.1:0", "-metrics", "").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("memnode without -state-dir: %v, want exit status 2\n%s", err, out)
	}
	for _, want := range []string{"state_dir is not set", "-state-dir DIR", "-etcd"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the refusal does not say %q:\n%s", want, out)
		}
	}
	out, err = exec.CommandContext(ctx, testproc.Bin(t, "proxy"), "-listen", "127.0.0.1:0", "-metrics", "").CombinedOutput()
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "-state-dir DIR") {
		t.Fatalf("proxy on its embedded memory node without -state-dir: %v, want exit status 2 and how to fix it\n%s", err, out)
	}
}

// restartableMemnode starts a memory node on a port and a state directory
// of its own, and returns it with a function that starts it again the same
// way, after it was killed.
func restartableMemnode(t *testing.T) (*testproc.Proc, func()) {
	args := []string{"-listen", fmt.Sprintf("127.0.0.1:%d", testproc.FreePort(t)), "-metrics", "", "-entries", "4096", "-state-dir", t.TempDir()}
	bin := testproc.Bin(t, "memnode")
	return testproc.Start(t, "memnode", bin, args, testproc.MemnodeReady), func() {
		testproc.Start(t, "memnode-restarted", bin, args, testproc.MemnodeReady)
	}
}

// restartableProxy starts a proxy on its embedded memory node, on a port and
// a state directory of its own, and returns it with a function that starts
// it again the same way, after it was killed. The new process serves only
// once the locks of the old one have run out, so it is started in the
// background for the test to ask for them meanwhile: the function returns
// one that waits for the start and says whether it failed. The process is
// killed when the test ends.
func restartableProxy(t *testing.T) (*testproc.Proc, func() (started func() error)) {
	return restartableProxyIn(t, t.TempDir())
}

// restartableProxyIn is restartableProxy with the state directory dir, and
// extra flags.
func restartableProxyIn(t *testing.T, dir string, extra ...string) (*testproc.Proc, func() (started func() error)) {
	args := append([]string{"-listen", fmt.Sprintf("127.0.0.1:%d", testproc.FreePort(t)), "-metrics", "", "-state-dir", dir}, testproc.ProxyArgs()...)
	args = append(args, extra...)
	bin := testproc.Bin(t, "proxy")
	restart := func() func() error {
		done := make(chan struct{})
		var q *testproc.Proc
		var err error
		go func() {
			defer close(done)
			q, err = testproc.Launch("proxy-restarted", bin, args, testproc.ProxyReady, 30*time.Second)
		}()
		t.Cleanup(func() {
			<-done
			if q != nil {
				q.Kill()
			}
		})
		return func() error { <-done; return err }
	}
	return testproc.Start(t, "proxy", bin, args, testproc.ProxyReady), restart
}

// TestMemnodeRestartGrantsNothingFromBefore: client A holds k through proxy
// A (LOCK.ACQUIRE k a PX 4000); the memory node is killed with -9 and
// started again the same way. Client B, through proxy B, must not be granted
// k while A's TTL still runs, and its fence must be above A's. Before, B got
// k about a second after the restart, with fence 1.
func TestMemnodeRestartGrantsNothingFromBefore(t *testing.T) {
	mn, restart := restartableMemnode(t)
	pa := testproc.Proxy(t, "-memnode", mn.Addr)
	pb := testproc.Proxy(t, "-memnode", mn.Addr)
	a, b := client(t, pa.Addr), client(t, pb.Addr)
	ctx := ctxT(t, time.Minute)

	const ttl = 4 * time.Second
	sent := time.Now()
	fa, err := a.Do(ctx, "LOCK.ACQUIRE", "k", "a", "PX", ttl.Milliseconds()).Uint64()
	if err != nil {
		t.Fatal(err)
	}
	mn.Kill()
	restart()

	fb, grantedBy := acquireEventually(ctx, t, b, "k", "b", ttl)
	if early := sent.Add(ttl).Sub(grantedBy); early > 0 {
		t.Fatalf("B was granted k (fence %d) %v before A's lock (fence %d) could have run out", fb, early, fa)
	}
	if fb <= fa {
		t.Fatalf("fence %d after the restart is not above %d from before it", fb, fa)
	}
}

// TestEmbeddedProxyRestartGrantsNothingFromBefore is the same for a proxy on
// its embedded memory node (make run): killed with -9 while a client holds
// k, and started again on its address and state directory, it must not
// grant k before the holder's TTL has run out, and its fences go on rising.
// Before, the new process granted k at once, with fence 1.
func TestEmbeddedProxyRestartGrantsNothingFromBefore(t *testing.T) {
	p, restart := restartableProxy(t)
	c := client(t, p.Addr)
	ctx := ctxT(t, time.Minute)

	const ttl = 4 * time.Second
	sent := time.Now()
	fa, err := c.Do(ctx, "LOCK.ACQUIRE", "k", "a", "PX", ttl.Milliseconds()).Uint64()
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.SetNX(ctx, "plain", "a", ttl).Result(); !ok || err != nil {
		t.Fatalf("SET NX: %v %v", ok, err)
	}
	// A second of heartbeats, which the state then reflects: the restart
	// must owe the locks their TTLs, not what a memory node process owes
	// (dead_after is a year on the embedded one), or it would never serve.
	time.Sleep(time.Second)
	p.Kill()
	started := restart()
	fb, grantedBy := acquireEventually(ctx, t, c, "k", "b", ttl)
	if early := sent.Add(ttl).Sub(grantedBy); early > 0 {
		t.Fatalf("the restarted proxy granted k (fence %d) %v before the lock of its previous run (fence %d) could have run out", fb, early, fa)
	}
	if fb <= fa {
		t.Fatalf("fence %d after the restart is not above %d from before it", fb, fa)
	}
	if ok, err := c.SetNX(ctx, "plain", "b", ttl).Result(); !ok || err != nil {
		t.Fatalf("SET NX after the old lock ran out: %v %v", ok, err)
	}
	if err := started(); err != nil {
		t.Fatal(err)
	}
}

// TestReleasedDayLockDoesNotHoldUpARestart: a job takes a lock for a day
// through an embedded proxy (SET nightly 1 NX EX 86400) and releases it;
// another client holds a 15 s lock. The proxy is killed with -9 and started
// again on its state directory. It owes the 15 s lock, and only that, once
// the room its lease keeps for the next lock of a day has lapsed (10 s
// after the grant): before, the state kept the day (a horizon only came
// down as deadlines passed, released or not), and the restarted proxy
// served no lock, nor listened, for 24 hours.
func TestReleasedDayLockDoesNotHoldUpARestart(t *testing.T) {
	dir := t.TempDir()
	p, restart := restartableProxyIn(t, dir)
	c := client(t, p.Addr)
	ctx := ctxT(t, time.Minute)

	if ok, err := c.SetNX(ctx, "nightly", "1", 24*time.Hour).Result(); !ok || err != nil {
		t.Fatalf("SET nightly NX EX 86400: %v %v", ok, err)
	}
	if n, err := c.Del(ctx, "nightly").Result(); n != 1 || err != nil {
		t.Fatalf("DEL nightly: %v %v", n, err)
	}
	const ttl = 15 * time.Second // outlives the room
	sent := time.Now()
	if ok, err := c.SetNX(ctx, "held", "a", ttl).Result(); !ok || err != nil {
		t.Fatalf("SET held NX: %v %v", ok, err)
	}
	// What a restart would owe, as the state directory says.
	for released := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		h := savedHorizon(t, dir)
		if h < time.Minute {
			break
		}
		if time.Since(released) > 40*time.Second {
			t.Fatalf("40 s after the day's lock was released, a restart would still owe %v", h)
		}
	}
	p.Kill()
	started := restart()
	_, grantedBy := acquireEventually(ctx, t, c, "held", "b", ttl)
	if early := sent.Add(ttl).Sub(grantedBy); early > 0 {
		t.Fatalf("the restarted proxy granted held %v before the lock of its previous run could have run out", early)
	}
	if err := started(); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.SetNX(ctx, "nightly", "2", 24*time.Hour).Result(); !ok || err != nil {
		t.Fatalf("SET nightly NX EX 86400 after the restart: %v %v", ok, err)
	}
}

// TestStoppedProxyOwesTheNextStartOnlyTheLocksStillHeld: an embedded proxy
// stopped with SIGTERM once its clients released their locks (one of an
// hour, one of 30 s, the way a deploy finds them; a key's and a range
// lock's span) leaves a state directory
// that owes the next start nothing but its margin, so a restart serves at
// once; a lock still held when the drain gives up (drain_timeout 0) is
// still waited out by the next start. Before, the clean stop saved the room
// the lease keeps for the next grant of the longest recent TTL: the next
// start served nothing for an hour (for 30 s with only the 30 s lock),
// although nothing was held; and a released span counted until its
// deadline, whatever the stop.
func TestStoppedProxyOwesTheNextStartOnlyTheLocksStillHeld(t *testing.T) {
	dir := t.TempDir()
	ctx := ctxT(t, time.Minute)
	for _, ttl := range []time.Duration{30 * time.Second, time.Hour} {
		p, _ := restartableProxyIn(t, dir)
		c := client(t, p.Addr)
		if ok, err := c.SetNX(ctx, "job", "1", ttl).Result(); !ok || err != nil {
			t.Fatalf("SET job NX PX %d: %v %v", ttl.Milliseconds(), ok, err)
		}
		if n, err := c.Del(ctx, "job").Result(); n != 1 || err != nil {
			t.Fatalf("DEL job: %v %v", n, err)
		}
		// A range lock's span too.
		if f, err := c.Do(ctx, "LOCK.RANGE.ACQUIRE", "file", 0, 10, "t", "PX", ttl.Milliseconds()).Int64(); f == 0 || err != nil {
			t.Fatalf("LOCK.RANGE.ACQUIRE file: %v %v", f, err)
		}
		if n, err := c.Do(ctx, "LOCK.RANGE.RELEASE", "file", 0, 10, "t").Int(); n != 1 || err != nil {
			t.Fatalf("LOCK.RANGE.RELEASE file: %v %v", n, err)
		}
		if err := p.Stop(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		// Nothing was held: what is owed is the embedded lease's margin
		// (a quarter of a second), and at most a few beats' worth of
		// slack, nowhere near the TTL.
		h := savedHorizon(t, dir)
		if h > 5*time.Second {
			t.Fatalf("TTL %v: stopped with no lock held, the state directory owes the next start %v", ttl, h)
		}
		t.Logf("TTL %v: stopped with no lock held, the next start owes %v", ttl, h)
		// The next round's start, and the last part's, is the restart.
	}

	p, restart := restartableProxyIn(t, dir, "-drain-timeout", "0")
	c := client(t, p.Addr)
	const ttl = 6 * time.Second
	sent := time.Now()
	if ok, err := c.SetNX(ctx, "held", "a", ttl).Result(); !ok || err != nil {
		t.Fatalf("SET held NX: %v %v", ok, err)
	}
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	started := restart()
	_, grantedBy := acquireEventually(ctx, t, c, "held", "b", ttl)
	if early := sent.Add(ttl).Sub(grantedBy); early > 0 {
		t.Fatalf("the restarted proxy granted held %v before the lock its previous run left held could have run out", early)
	}
	if err := started(); err != nil {
		t.Fatal(err)
	}
}

// savedHorizon is how long a restart on the state directory dir would
// serve nothing, from when it was saved.
func savedHorizon(t *testing.T, dir string) time.Duration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "memnode-state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		MaxHorizonMs uint64 `json:"max_horizon_ms"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return time.Duration(st.MaxHorizonMs) * time.Millisecond
}

// acquireEventually asks for key until it is granted, through whatever
// errors a restart causes (a refused connection, TRYAGAIN), and returns the
// fence and when the reply was in.
func acquireEventually(ctx context.Context, t *testing.T, c *redis.Client, key, token string, ttl time.Duration) (uint64, time.Time) {
	t.Helper()
	deadline, _ := ctx.Deadline()
	return untilGranted(t, deadline, anyError, func() (uint64, error) {
		return c.Do(ctx, "LOCK.ACQUIRE", key, token, "PX", ttl.Milliseconds(), "WAIT", 100).Uint64()
	})
}

// TestHangupStopsCleanly: SIGHUP, what a proxy run from a terminal gets
// when the terminal closes (`make run`), stops it as SIGTERM does: drained,
// exit 0, and the state directory owes the next start only the locks still
// held. Before, Go's default had it die at once, as from kill -9, and the
// next start owed the room kept for the next grant (30 s here).
func TestHangupStopsCleanly(t *testing.T) {
	dir := t.TempDir()
	p, _ := restartableProxyIn(t, dir)
	c := client(t, p.Addr)
	ctx := ctxT(t, time.Minute)
	if ok, err := c.SetNX(ctx, "job", "1", 30*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET job NX: %v %v", ok, err)
	}
	if n, err := c.Del(ctx, "job").Result(); n != 1 || err != nil {
		t.Fatalf("DEL job: %v %v", n, err)
	}
	p.Signal(syscall.SIGHUP)
	waitExit(t, p, 30*time.Second)
	if err := p.Stop(time.Second); err != nil {
		t.Fatalf("after SIGHUP: %v, want a clean exit\n%s", err, p.Output())
	}
	if !strings.Contains(p.Output(), "shutting down") {
		t.Fatalf("no drain in the log:\n%s", p.Output())
	}
	if h := savedHorizon(t, dir); h > 5*time.Second {
		t.Fatalf("stopped by SIGHUP with no lock held, the state directory owes the next start %v", h)
	}
}
