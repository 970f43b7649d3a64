package tcpfab

import (
	"testing"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/fabrictest"
)

// TestConformance runs the suite every fabric must pass, including its
// concurrent MaskedFAA128 lost-update check, over real loopback TCP.
func TestConformance(t *testing.T) {
	ts := startServer(t, memnode.Config{Entries: 1 << 14})
	fabrictest.Run(t, func(t *testing.T, name string) rdma.Endpoint {
		return dial(t, ts.addr, name)
	})
}
