// Package maptest makes lock tables (lockmap.Map) for tests: alone on a
// memory node in the test's process, as an embedded proxy runs, or on a
// memnode process of their own reached over tcpfab, as a proxy joined to
// a memory node runs. Each is closed, with what it runs on, when the test
// ends.
package maptest

import (
	"context"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// Embedded is a lock table configured as cfg, alone on an in-process
// memory node configured as host, without owner tags or a lease; ep,
// its endpoint, counts the verbs its lock operations cost.
func Embedded(t testing.TB, host memnode.Config, cfg lockmap.Config) (*lockmap.Map, *memfab.Endpoint) {
	t.Helper()
	h := memnode.New(host)
	t.Cleanup(h.Close)
	ep, err := memfab.New(h).Join("proxy")
	if err != nil {
		t.Fatal(err)
	}
	m := lockmap.New([]*lockmap.Domain{{Name: "embedded", Client: shiftlock.NewClient(ep, shiftlock.Config{})}}, cfg)
	t.Cleanup(m.Close)
	return m, ep
}

// Network is a lock table whose client is configured as cfg, on a memnode
// process of its own reached over tcpfab; ep counts its verbs.
func Network(t testing.TB, cfg shiftlock.Config) (*lockmap.Map, *tcpfab.Endpoint) {
	t.Helper()
	mn := testproc.Memnode(t, "-entries", "4096", "-dead-after", "1m")
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	ep, err := tcpfab.Dial(dctx, mn.Addr, tcpfab.Config{Name: t.Name()})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	m := lockmap.New([]*lockmap.Domain{{Name: "mn", Client: shiftlock.NewClient(ep, cfg)}}, lockmap.Config{})
	t.Cleanup(m.Close)
	return m, ep
}
