package itest

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// underUlimit starts the proxy with its descriptor limit set to n, as
// "ulimit -n n" in the shell that starts it.
func underUlimit(t *testing.T, n int, args ...string) *testproc.Proc {
	t.Helper()
	base := append([]string{"-listen", "127.0.0.1:0", "-metrics", "127.0.0.1:0", "-state-dir", t.TempDir()}, testproc.ProxyArgs()...)
	script := fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, n)
	return testproc.Start(t, "proxy", "/bin/sh", append([]string{"-c", script, testproc.Bin(t, "proxy")}, append(base, args...)...), testproc.ProxyReady)
}

// TestDescriptorLimit (item 6): under "ulimit -n 256" and the default
// maxclients of 10000, the proxy lowers maxclients to what the limit
// leaves after its own descriptors, and says so. 400 idle connections
// then get the clients they can, and the rest Redis's refusal; the proxy
// keeps serving its clients and /metrics, and serves new clients once
// some leave. Before, the gnet front end exited ("main reactor is
// exiting") and the redcon one spun on accept errors with /metrics dead.
func TestDescriptorLimit(t *testing.T) {
	eachFrontend(t, func(t *testing.T, fe string) {
		p := underUlimit(t, 256, "-frontend", fe)
		maddr := metricsAddr(t, p)
		first := dialRaw(t, p.Addr)
		if got := first.do("SET", "k", "first", "NX", "PX", "600000"); got != "+OK" {
			t.Fatalf("SET = %q", got)
		}
		var conns []net.Conn
		t.Cleanup(func() {
			for _, c := range conns {
				c.Close()
			}
		})
		served, refused := 0, 0
		for i := 0; i < 400; i++ {
			c, err := net.DialTimeout("tcp", p.Addr, 10*time.Second)
			if err != nil {
				t.Fatalf("dial %d: %v", i, err)
			}
			conns = append(conns, c)
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := c.Write([]byte("PING\r\n")); err != nil {
				refused++
				continue
			}
			line, err := bufio.NewReader(c).ReadString('\n')
			switch {
			case line == "+PONG\r\n":
				served++
			case line == "-ERR max number of clients reached\r\n":
				refused++
			default:
				t.Fatalf("connection %d: %q, %v (served %d, refused %d)", i, line, err, served, refused)
			}
		}
		t.Logf("%d served, %d refused", served, refused)
		if p.Exited() {
			t.Fatalf("the proxy exited:\n%s", p.Output())
		}
		if served == 0 || refused == 0 {
			t.Fatalf("served %d, refused %d: want some of each", served, refused)
		}
		if !strings.Contains(p.Output(), "maxclients lowered") {
			t.Errorf("the proxy did not say it lowered maxclients:\n%s", p.Output())
		}
		if got := first.do("GET", "k"); got != "first" {
			t.Fatalf("a client connected before: GET = %q", got)
		}
		hc := http.Client{Timeout: 10 * time.Second}
		resp, err := hc.Get("http://" + maddr + "/metrics")
		if err != nil {
			t.Fatalf("/metrics with the clients full: %v", err)
		}
		resp.Body.Close()
		for _, c := range conns {
			c.Close()
		}
		conns = nil
		deadline := time.Now().Add(30 * time.Second)
		for {
			c := dialRaw(t, p.Addr)
			if got := c.do("PING"); got == "+PONG" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no new client served after the others left")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// TestDescriptorLimitTooLow: a descriptor limit that leaves the proxy no
// room for a single client is refused at start, with how to fix it.
func TestDescriptorLimitTooLow(t *testing.T) {
	script := `ulimit -n 40 && exec "$0" "$@"`
	out, err := exec.Command("/bin/sh", "-c", script, testproc.Bin(t, "proxy"), "-listen", "127.0.0.1:0", "-metrics", "127.0.0.1:0", "-state-dir", t.TempDir()).CombinedOutput()
	if err == nil {
		t.Fatalf("the proxy started under ulimit -n 40:\n%s", out)
	}
	if !strings.Contains(string(out), "no room for clients") || !strings.Contains(string(out), "ulimit -n") {
		t.Fatalf("the refusal does not say why and how to fix it: %v\n%s", err, out)
	}
}
