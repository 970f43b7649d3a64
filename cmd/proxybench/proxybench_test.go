package main

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestNullServer: the ceiling is only a ceiling if the workload runs on it
// exactly as on the proxy, replies included.
func TestNullServer(t *testing.T) {
	bin := testproc.Bin(t, "proxybench")
	p := testproc.Start(t, "null", bin, []string{"-serve-null", "127.0.0.1:0"}, nullReady)
	c := redis.NewClient(&redis.Options{Addr: p.Addr})
	defer c.Close()
	ctx := context.Background()
	ok, err := c.SetNX(ctx, "k", "tok", time.Second).Result()
	if err != nil || !ok {
		t.Fatalf("SET NX = %v, %v; want true", ok, err)
	}
	n, err := release.Run(ctx, c, []string{"k"}, "tok").Int()
	if err != nil || n != 1 {
		t.Fatalf("release = %v, %v; want 1", n, err)
	}
	r, err := throughput(ctx, &proc{cmd: p.Cmd, addr: p.Addr}, 4, 300*time.Millisecond)
	if err != nil || r.rate <= 0 || r.cpu <= 0 {
		t.Fatalf("throughput = %+v, %v; want cycles and the server's CPU per cycle", r, err)
	}
}

// TestSmoke runs the whole tool briefly against the real proxy and Redis and
// checks that the report has every section and verdict. It asserts no
// timing: the numbers of so short a run mean nothing.
func TestSmoke(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server not found (make test installs it: scripts/install-deps.sh)")
	}
	bin, proxy := testproc.Bin(t, "proxybench"), testproc.Bin(t, "proxy")
	out, err := exec.Command(bin, "-proxy-bin", proxy, "-runs", "1", "-clients", "8", "-latency-cycles", "200",
		"-throughput-time", "300ms", "-hot-time", "1s").Output()
	if err != nil {
		t.Fatalf("proxybench: %v\n%s", err, out)
	}
	report := string(out)
	for _, want := range []string{
		"| redis |", "| proxy |", "| null server", "server CPU per cycle",
		"Proxy/Redis p50 ratio: **", "Proxy/Redis throughput ratio: **", "Null server/Redis, the ceiling",
		"Proxy/Redis acquisitions/s: **", "Proxy/Redis max time to acquire: **", "Proxy per-client max/min: **",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	// Every client of the proxy's hot key must have had the lock: waiting
	// is FIFO, so a one-second run starves nobody.
	row := regexp.MustCompile(`(?m)^\| proxy \| \d+ \|.*\| \d+ \| (\d+) / \d+ / \d+ \|`).FindStringSubmatch(report)
	if row == nil {
		t.Fatalf("no proxy hot-key row:\n%s", report)
	}
	if row[1] == "0" {
		t.Errorf("a proxy client never acquired the hot key:\n%s", report)
	}
}
