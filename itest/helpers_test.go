package itest

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func client(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	t.Cleanup(func() { c.Close() })
	return c
}

// cluster is one memnode process with n proxy processes joined to it.
func cluster(t *testing.T, n int, proxyArgs ...string) (*testproc.Proc, []*testproc.Proc) {
	mn := testproc.Memnode(t, "-entries", "65536")
	var ps []*testproc.Proc
	for i := 0; i < n; i++ {
		ps = append(ps, testproc.Proxy(t, append([]string{"-memnode", mn.Addr}, proxyArgs...)...))
	}
	return mn, ps
}

var metricsLine = regexp.MustCompile(`metrics on (\S+)`)

// metricsAddr is where a proxy started with -metrics serves /metrics, from
// the line it prints.
func metricsAddr(t *testing.T, p *testproc.Proc) string {
	t.Helper()
	m := metricsLine.FindStringSubmatch(p.Output())
	if m == nil {
		t.Fatalf("the proxy did not print its metrics address:\n%s", p.Output())
	}
	return m[1]
}
