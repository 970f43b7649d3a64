package itest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
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

// TestMemnodeRestartGrantsNothingFromBefore: client A holds k through proxy
// A (LOCK.ACQUIRE k a PX 4000); the memory node is killed with -9 and
// started again the same way. Client B, through proxy B, must not be granted
// k while A's TTL still runs, and its fence must be above A's. Before, B got
// k about a second after the restart, with fence 1.
func TestMemnodeRestartGrantsNothingFromBefore(t *testing.T) {
	port := testproc.FreePort(t)
	args := []string{"-listen", fmt.Sprintf("127.0.0.1:%d", port), "-metrics", "", "-entries", "4096", "-state-dir", t.TempDir()}
	mn := testproc.Start(t, "memnode", testproc.Bin(t, "memnode"), args, testproc.MemnodeReady)
	pa := testproc.Proxy(t, "-memnode", mn.Addr)
	pb := testproc.Proxy(t, "-memnode", mn.Addr)
	a, b := client(t, pa.Addr), client(t, pb.Addr)
	ctx := ctxT(t, time.Minute)

	const ttl = 4 * time.Second
	sent := time.Now()
	fa, err := a.Do(ctx, "LOCK.ACQUIRE", "k", "a", "PX", ttl.Milliseconds()).Int64()
	if err != nil {
		t.Fatal(err)
	}
	mn.Kill()
	testproc.Start(t, "memnode-restarted", testproc.Bin(t, "memnode"), args, testproc.MemnodeReady)

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
	port := testproc.FreePort(t)
	args := append([]string{"-listen", fmt.Sprintf("127.0.0.1:%d", port), "-metrics", "", "-state-dir", t.TempDir()}, testproc.ProxyArgs()...)
	p := testproc.Start(t, "proxy", testproc.Bin(t, "proxy"), args, testproc.ProxyReady)
	c := client(t, p.Addr)
	ctx := ctxT(t, time.Minute)

	const ttl = 4 * time.Second
	sent := time.Now()
	fa, err := c.Do(ctx, "LOCK.ACQUIRE", "k", "a", "PX", ttl.Milliseconds()).Int64()
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
	// The new process serves once the old one's locks have run out: it
	// is ready only then, so start it in the background and ask meanwhile.
	restarted := make(chan error, 1)
	go func() {
		q, err := testproc.Launch("proxy-restarted", testproc.Bin(t, "proxy"), args, testproc.ProxyReady, 30*time.Second)
		if err == nil {
			t.Cleanup(q.Kill)
		}
		restarted <- err
	}()
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
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
}

// acquireEventually asks for key until it is granted, through whatever
// errors a restart causes (a refused connection, TRYAGAIN), and returns the
// fence and when the reply was in.
func acquireEventually(ctx context.Context, t *testing.T, c *redis.Client, key, token string, ttl time.Duration) (int64, time.Time) {
	t.Helper()
	var last error
	for ctx.Err() == nil {
		f, err := c.Do(ctx, "LOCK.ACQUIRE", key, token, "PX", ttl.Milliseconds(), "WAIT", 100).Int64()
		if err == nil {
			return f, time.Now()
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never granted: %v", key, last)
	return 0, time.Time{}
}
