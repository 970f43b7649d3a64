package tcpfab

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// testServer is a memory node served by tcpfab on a loopback port. Its log
// is observed, so tests can check why a connection was closed.
type testServer struct {
	host *memnode.Server
	srv  *Server
	addr string
	logs *observer.ObservedLogs
}

func startServer(t testing.TB, cfg memnode.Config) *testServer {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))
	if cfg.DeadAfter == 0 {
		// Tests that do not heartbeat must not be fenced by a slow,
		// loaded (-race) run; the fencing tests set their own timing.
		cfg.DeadAfter = time.Minute
	}
	host := memnode.New(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(host, log)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != ErrServerClosed {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
		host.Close()
	})
	return &testServer{host: host, srv: srv, addr: ln.Addr().String(), logs: logs}
}

func dial(t testing.TB, addr, name string) *Endpoint {
	t.Helper()
	return dialCfg(t, addr, Config{Name: name})
}

func dialCfg(t testing.TB, addr string, cfg Config) *Endpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t)
	}
	ep, err := Dial(ctx, addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustFAA checks that ep still works: an FAA on entry returns the expected
// old value.
func mustFAA(t testing.TB, ep rdma.Endpoint, entry, wantOld uint64) {
	t.Helper()
	old, err := ep.FAA(testCtx(t), ep.Layout().EntryAddr(entry), 1)
	if err != nil {
		t.Fatalf("FAA on a healthy endpoint: %v", err)
	}
	if old != wantOld {
		t.Fatalf("FAA returned old %d, want %d", old, wantOld)
	}
}
