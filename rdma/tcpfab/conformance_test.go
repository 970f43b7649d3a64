package tcpfab_test

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/fabrictest"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
)

// startServer runs a memory node served by tcpfab on a loopback port.
func startServer(t testing.TB, cfg memnode.Config) (*memnode.Server, *tcpfab.Server, string) {
	t.Helper()
	host := memnode.New(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := tcpfab.NewServer(host, zaptest.NewLogger(t))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		<-done
		host.Close()
	})
	return host, srv, ln.Addr().String()
}

func dial(t testing.TB, addr, name string) *tcpfab.Endpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ep, err := tcpfab.Dial(ctx, addr, tcpfab.Config{Name: name, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep
}

func TestConformance(t *testing.T) {
	_, _, addr := startServer(t, memnode.Config{Entries: 1 << 14})
	fabrictest.Run(t, func(t *testing.T, name string) rdma.Endpoint {
		return dial(t, addr, name)
	})
}
