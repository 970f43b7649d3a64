package itest

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestFabricSecret: a memory node with a fabric secret serves proxies that
// share it (a lock handed over from one proxy to another crosses their
// authenticated peer link), and a proxy with no secret or a wrong one
// cannot join: it exits with the reason, and the memory node logs why it
// closed the connection.
func TestFabricSecret(t *testing.T) {
	secret := writeFabricSecret(t)
	wrong := tempFile(t, "wrong.secret", "fedcba9876543210fedcba9876543210\n")
	mn := testproc.Memnode(t, "-entries", "4096", "-fabric-secret-file", secret)
	a := testproc.Proxy(t, "-memnode", mn.Addr, "-fabric-secret-file", secret, "-acquire-wait", "10s")
	b := testproc.Proxy(t, "-memnode", mn.Addr, "-fabric-secret-file", secret, "-acquire-wait", "10s")
	ctx := ctxT(t, time.Minute)
	ca, cb := client(t, a.Addr), client(t, b.Addr)
	if ok, err := ca.SetNX(ctx, "fab", "x", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("SetNX through a: %v %v", ok, err)
	}
	queued := setNXLater(ctx, cb, "fab", "y", time.Minute)
	awaitInfo(t, cb, "blocked_clients:1")
	if n, err := redis.NewScript(casDelete).Run(ctx, ca, []string{"fab"}, "x").Int(); n != 1 || err != nil {
		t.Fatalf("release through a: %d %v", n, err)
	}
	if err := <-queued; err != nil {
		t.Fatalf("the waiter on b was not handed the lock over the authenticated peer link: %v", err)
	}

	bin := testproc.Bin(t, "proxy")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"no secret", nil},
		{"wrong secret", []string{"-fabric-secret-file", wrong}},
	} {
		args := append([]string{"-listen", "127.0.0.1:0", "-metrics", "", "-memnode", mn.Addr}, c.args...)
		p, err := testproc.Launch("proxy", bin, args, testproc.ProxyReady, 20*time.Second)
		if err == nil {
			p.Kill()
			t.Fatalf("a proxy with %s joined a memory node that requires a secret", c.name)
		}
		if !strings.Contains(err.Error(), "fabric authentication") {
			t.Fatalf("a proxy with %s failed without saying why:\n%v", c.name, err)
		}
	}
	if !strings.Contains(mn.Output(), "closing unauthenticated connection") {
		t.Fatalf("the memory node did not log the refusals:\n%s", mn.Output())
	}
}
