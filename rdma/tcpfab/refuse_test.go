package tcpfab

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/shiftlock/shiftlock-proxy/memnode"
)

// refuseMany opens n connections to a port that requires the fabric
// secret. Each reads the challenge, so it is surely accepted and in the
// middle of it, then answers with an HTTP request and hangs up: what a
// scanner or a misdirected client does, over and over.
func refuseMany(t *testing.T, addr string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, len(authPreamble)+authNonce)); err != nil {
			t.Fatalf("connection %d: no challenge: %v", i, err)
		}
		_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		_ = c.Close()
	}
}

// checkSampled: n refusals over elapsed wrote lines log lines. A line per
// refusal lets anyone who can reach the port fill the disk (63k refusals
// in 10 s wrote 11 MB); at most one line a second is a generous bound on
// any sampling.
func checkSampled(t *testing.T, what string, lines, n int, elapsed time.Duration) {
	t.Helper()
	if bound := 2 + int(elapsed/time.Second); lines > bound {
		t.Errorf("%s: %d refused connections in %v wrote %d log lines, want at most %d", what, n, elapsed.Round(time.Millisecond), lines, bound)
	}
}

// TestRefusalFloodIsSampled: a flood of unauthenticated connections to the
// memory node's port and to a node's peer port is counted in full and
// logged sampled: the first refusal with its reason, then a line now and
// then that says how many went unlogged.
func TestRefusalFloodIsSampled(t *testing.T) {
	const flood = 200

	core, logs := observer.New(zapcore.InfoLevel)
	host := memnode.New(memnode.Config{Entries: 64, DeadAfter: time.Minute})
	t.Cleanup(host.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(host, zap.New(core))
	srv.RequireSecret(testSecret)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	start := time.Now()
	refuseMany(t, ln.Addr().String(), flood)
	srv.Close() // waits for every connection's goroutine: every refusal is in
	lines := logs.FilterMessageSnippet("unauthenticated").All()
	checkSampled(t, "memory node", len(lines), flood, time.Since(start))
	if len(lines) == 0 {
		t.Error("no refusal logged at all")
	}
	if n := srv.Refused(); n != flood {
		t.Errorf("the memory node counted %d refusals, want %d", n, flood)
	}

	// The peer port of a node that joined with the secret.
	ts := startServer(t, memnode.Config{Entries: 64})
	ts.srv.RequireSecret(testSecret)
	pcore, plogs := observer.New(zapcore.InfoLevel)
	shared := &Refusals{}
	ep, err := Dial(testCtx(t), ts.addr, Config{Name: "a", Secret: testSecret, Logger: zap.New(pcore), Refusals: shared})
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	refuseMany(t, ep.PeerAddr(), flood)
	_ = ep.Close() // waits for the peer port's goroutines
	plines := plogs.FilterMessageSnippet("unauthenticated").All()
	checkSampled(t, "peer port", len(plines), flood, time.Since(start))
	if len(plines) == 0 {
		t.Error("no refusal logged at all on the peer port")
	}
	if n := shared.Count(); n != flood || ep.Refused() != flood {
		t.Errorf("the peer port counted %d (endpoint: %d) refusals, want %d", n, ep.Refused(), flood)
	}
	for _, e := range append(lines, plines...) {
		if reason, _ := e.ContextMap()["error"].(string); !strings.Contains(reason, "fabric authentication failed") {
			t.Errorf("a refusal was logged without its reason: %v", e.ContextMap())
		}
	}
}
