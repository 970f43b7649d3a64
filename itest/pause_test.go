package itest

import (
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestEmbeddedSurvivesPause: a proxy on its embedded memory node keeps its
// locks across a process pause, as Redis keeps its keys. The pause is twice
// a shared memory node's default dead_after, which would cost a proxy on a
// memnode process its membership; here nobody else uses the table, so
// fencing could only lose locks. It also takes a TTL longer than a shared
// memory node's default max_lease.
func TestEmbeddedSurvivesPause(t *testing.T) {
	p := testproc.Proxy(t)
	c := client(t, p.Addr)
	ctx := ctxT(t, 30*time.Second)
	if ok, err := c.SetNX(ctx, "k", "me", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("SetNX: %v %v", ok, err)
	}
	if ok, err := c.SetNX(ctx, "long", "me", time.Hour).Result(); !ok || err != nil {
		t.Fatalf("SetNX with a one-hour TTL: %v %v", ok, err)
	}

	p.Signal(syscall.SIGSTOP)
	time.Sleep(2 * time.Second)
	p.Signal(syscall.SIGCONT)

	if v, err := c.Get(ctx, "k").Result(); v != "me" || err != nil {
		t.Fatalf("GET after the pause = %q, %v; want the holder's token", v, err)
	}
	if d, err := c.PTTL(ctx, "k").Result(); err != nil || d <= 0 || d > time.Minute {
		t.Fatalf("PTTL after the pause = %v, %v", d, err)
	}
	if ok, err := c.SetNX(ctx, "k", "you", time.Minute).Result(); ok || err != nil {
		t.Fatalf("SetNX by another token after the pause: %v %v; want not set", ok, err)
	}
	script := goredis.NewScript(casDelete)
	if n, err := script.Run(ctx, c, []string{"k"}, "me").Int(); n != 1 || err != nil {
		t.Fatalf("release after the pause: %d %v; want 1", n, err)
	}
	if ok, err := c.SetNX(ctx, "k", "you", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("SetNX after the release: %v %v", ok, err)
	}
	if d, err := c.TTL(ctx, "long").Result(); err != nil || d <= 59*time.Minute {
		t.Fatalf("TTL of the one-hour lock = %v, %v", d, err)
	}
	if out := p.Output(); strings.Contains(out, "membership lost") || strings.Contains(out, "lost with the old membership") {
		t.Fatalf("the proxy dropped its membership:\n%s", out)
	}
}
