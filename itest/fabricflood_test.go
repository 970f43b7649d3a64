package itest

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// writeFabricSecret writes a fabric secret file for the test.
func writeFabricSecret(t *testing.T) string {
	t.Helper()
	return tempFile(t, "fabric.secret", "0123456789abcdef0123456789abcdef\n")
}

// refuseMany opens n connections to a fabric port that requires the
// secret, and answers each challenge with an HTTP request: a scanner.
func refuseMany(t *testing.T, addr string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, 40)); err != nil { // "SLAUTH1\0" and a nonce
			t.Fatalf("connection %d to %s: no challenge: %v", i, addr, err)
		}
		_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		_ = c.Close()
	}
}

// TestFabricRefusalFloodIsCountedNotLogged: unauthenticated connections to
// the memory node's port and to a proxy's peer port are counted in
// /metrics, every one, but logged sampled: 63k of them in 10 s used to
// write 11 MB of log, a line each.
func TestFabricRefusalFloodIsCountedNotLogged(t *testing.T) {
	const flood = 300
	secret := writeFabricSecret(t)
	mn := testproc.Memnode(t, "-entries", "4096", "-fabric-secret-file", secret, "-metrics", "127.0.0.1:0")
	peer := fmt.Sprintf("127.0.0.1:%d", testproc.FreePort(t))
	px := testproc.Proxy(t, "-memnode", mn.Addr, "-fabric-secret-file", secret, "-peer-listen", peer, "-metrics", "127.0.0.1:0")

	for _, c := range []struct {
		proc    *testproc.Proc
		port    string
		metric  string
		message string
	}{
		{mn, mn.Addr, "memnode_refused_connections_total", "closing unauthenticated connection"},
		{px, peer, "proxy_peer_refused_connections_total", "closing unauthenticated peer connection"},
	} {
		maddr := metricsAddr(t, c.proc)
		start := time.Now()
		refuseMany(t, c.port, flood)
		got := metricValue(t, maddr, c.metric)
		for deadline := time.Now().Add(30 * time.Second); got != flood && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			got = metricValue(t, maddr, c.metric)
		}
		// The first refusal's line precedes the last count, but stderr is
		// read on its own: wait for it.
		awaitOutput(t, c.proc, c.message, 10*time.Second)
		elapsed := time.Since(start)
		if got != flood {
			t.Errorf("%s: %s is %v after %d refused connections, want %d", c.proc.Name, c.metric, got, flood, flood)
		}
		lines := strings.Count(c.proc.Output(), c.message)
		if bound := 2 + int(elapsed/time.Second); lines > bound {
			t.Errorf("%s: %d refused connections in %v wrote %d log lines, want at most %d", c.proc.Name, flood, elapsed.Round(time.Millisecond), lines, bound)
		}
	}
}
