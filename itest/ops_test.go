package itest

import (
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestMaxClients: with maxclients 2, a third connection is told Redis's
// error and closed, while the two keep working; once one leaves, a new one
// is served. INFO counts the refusal.
func TestMaxClients(t *testing.T) {
	eachFrontend(t, func(t *testing.T, fe string) {
		p := testproc.Proxy(t, "-maxclients", "2", "-frontend", fe)
		a, b := dialRaw(t, p.Addr), dialRaw(t, p.Addr)
		for _, c := range []*rawConn{a, b} {
			if got := c.do("PING"); got != "+PONG" {
				t.Fatalf("PING within maxclients = %q", got)
			}
		}
		third := dialRaw(t, p.Addr)
		if got := third.read(); got != "-ERR max number of clients reached" {
			t.Fatalf("connection past maxclients got %q", got)
		}
		if _, err := third.r.ReadByte(); err != io.EOF {
			t.Fatalf("connection past maxclients not closed: %v", err)
		}
		if got := a.do("PING"); got != "+PONG" {
			t.Fatalf("PING after the refusal = %q", got)
		}
		b.c.Close()
		// The proxy learns of the hang-up asynchronously: a new client
		// is served once it has.
		deadline := time.Now().Add(10 * time.Second)
		for {
			d := dialRaw(t, p.Addr)
			if got := d.do("PING"); got == "+PONG" {
				break
			} else if !strings.Contains(got, "max number of clients") && !strings.Contains(got, "EOF") && !strings.Contains(got, "reset") {
				t.Fatalf("new connection after one left: %q", got)
			}
			d.c.Close()
			if time.Now().After(deadline) {
				t.Fatal("no connection was served after a client left")
			}
			time.Sleep(20 * time.Millisecond)
		}
		info := a.do("INFO")
		for _, want := range []string{"maxclients:2\r\n", "rejected_connections:"} {
			if !strings.Contains(info, want) {
				t.Fatalf("INFO lacks %q:\n%s", want, info)
			}
		}
		if strings.Contains(info, "rejected_connections:0\r\n") {
			t.Fatalf("INFO does not count the refusal:\n%s", info)
		}
	})
}

// TestProbes: a proxy joined to a memory node is live and ready; when the
// node stops answering, the proxy loses its lease and turns not ready (it
// would answer lock commands with TRYAGAIN) while staying live; once the
// node runs again and the proxy has rejoined, it is ready again.
func TestProbes(t *testing.T) {
	mn := testproc.Memnode(t, "-entries", "4096")
	p := testproc.Proxy(t, "-memnode", mn.Addr, "-metrics", "127.0.0.1:0")
	maddr := metricsAddr(t, p)
	get := func(path string) (int, string) {
		t.Helper()
		c := http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get("http://" + maddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	waitFor := func(what string, code int) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, body := get("/readyz")
			if got == code {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz never became %d (%s): last %d %q", code, what, got, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if code, body := get("/healthz"); code != 200 {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	waitFor("joined", 200)

	if err := mn.Freeze(); err != nil {
		t.Fatal(err)
	}
	body := waitFor("memory node stopped", 503)
	if !strings.Contains(body, mn.Addr) {
		t.Fatalf("/readyz does not name the memory node: %q", body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz = %d while the memory node is stopped; liveness must not follow it", code)
	}
	mn.Signal(syscall.SIGCONT)
	waitFor("memory node resumed", 200)
}

// TestOutputLimit: a client that pipelines PINGs and never reads the
// replies is disconnected once more than max_output_bytes of them wait in
// the proxy, and the proxy says why; other clients are served meanwhile.
func TestOutputLimit(t *testing.T) {
	p := testproc.Proxy(t, "-max-output-bytes", "1048576", "-frontend", "gnet")
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096) // keep the kernel from absorbing the replies
	}
	batch := []byte(strings.Repeat("PING\r\n", 10000))
	closed := false
	_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	for i := 0; i < 2000 && !closed; i++ { // up to 120 MB of PINGs, 140 MB of replies
		if _, err := c.Write(batch); err != nil {
			closed = true
		}
	}
	if !closed {
		// The proxy may have closed after our last write: the next read
		// then ends early.
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil && !strings.Contains(err.Error(), "reset") {
			t.Fatalf("reading after the flood: %v", err)
		}
	}
	// The proxy closed the client that does not read.
	awaitOutput(t, p, "over the output limit", 10*time.Second)
	other := dialRaw(t, p.Addr)
	if got := other.do("PING"); got != "+PONG" {
		t.Fatalf("another client after the flood: %q", got)
	}
}
