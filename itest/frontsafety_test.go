package itest

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// Issue 32's front-end findings, against the real proxy process on both
// front ends: one input, a web page, the descriptor limit or a silent TLS
// client must not take the proxy, or anyone's lock, down.

// procKB reads a "Name:   123 kB" field of /proc/<pid>/status.
func procKB(t *testing.T, p *testproc.Proc, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + field + `:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in /proc/<pid>/status", field)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

// resetPeak starts the process's peak RSS (VmHWM) over from its RSS now.
func resetPeak(t *testing.T, p *testproc.Proc) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.Cmd.Process.Pid), []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
}

// sendAndRead writes in (in the background: the proxy may stop reading)
// and reads until the connection ends or 10 s pass without a byte.
func sendAndRead(t *testing.T, addr, in string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() { _, _ = io.WriteString(c, in) }()
	var out strings.Builder
	buf := make([]byte, 64<<10)
	for {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			return out.String()
		}
	}
}

// TestInputMemoryIsBounded (item 5): before and after AUTH, an inline line
// of 150,000 words, one just under Redis's 64 KiB inline cap, a multibulk
// of 65,536 empty arguments and a megabyte of pipelined one-word commands
// each raise the proxy's peak memory by a bounded amount: a constant plus a
// small factor of the input. Before, redcon's inline parser allocated a
// copy of the rest of the line per word: 1.4 GB for the first, 200 MB for
// the second. The proxy keeps serving, and the lock it holds stays held.
func TestInputMemoryIsBounded(t *testing.T) {
	words := func(n int) string { return strings.Repeat("a ", n) + "\r\n" }
	var manyArgs strings.Builder
	manyArgs.WriteString("*65536\r\n$4\r\nECHO\r\n")
	for i := 1; i < 65536; i++ {
		manyArgs.WriteString("$0\r\n\r\n")
	}
	cases := []struct {
		name, in string
		// closes: the input is refused and the connection closed.
		closes bool
	}{
		{"inline line of 150000 words", words(150000), true},
		{"inline line just under 64 KiB", words(32760), false},
		{"multibulk of 65536 empty arguments", manyArgs.String(), false},
		{"a megabyte of one-word commands", strings.Repeat("a\r\n", 350000), false},
	}
	eachFrontend(t, func(t *testing.T, fe string) {
		p := testproc.Proxy(t, "-frontend", fe, "-requirepass", "pw")
		holder := dialRaw(t, p.Addr)
		if got := holder.do("AUTH", "pw"); got != "+OK" {
			t.Fatalf("AUTH = %q", got)
		}
		if got := holder.do("SET", "held", "me", "NX", "PX", "600000"); got != "+OK" {
			t.Fatalf("SET = %q", got)
		}
		for _, authed := range []bool{false, true} {
			for _, c := range cases {
				in := c.in
				if authed {
					in = "AUTH pw\r\n" + in
				}
				if !c.closes {
					in += "QUIT\r\n" // the proxy closes: the reply is all there
				}
				resetPeak(t, p)
				before := procKB(t, p, "VmRSS")
				out := sendAndRead(t, p.Addr, in)
				grew := procKB(t, p, "VmHWM") - before
				// 32 MiB of replies may wait for a client that reads
				// slowly (max_output_bytes), 32 MiB more for the Go
				// heap's slack, and 16 times the input.
				bound := int64(64<<10) + 16*int64(len(in))/1024
				t.Logf("%s (authed %v, %d bytes): peak RSS +%d kB (bound %d kB), reply %q...", c.name, authed, len(in), grew, bound, firstLine(out))
				if p.Exited() {
					t.Fatalf("%s: the proxy died:\n%s", c.name, p.Output())
				}
				if grew > bound {
					t.Errorf("%s (authed %v): peak RSS grew %d kB for %d bytes of input; bound %d kB", c.name, authed, grew, len(in), bound)
				}
				if c.closes && !strings.HasPrefix(out, "-ERR Protocol error: too big inline request") && !(authed && strings.HasPrefix(out, "+OK\r\n-ERR Protocol error: too big inline request")) {
					t.Errorf("%s: reply %q, want Redis's -ERR Protocol error: too big inline request", c.name, firstLine(out))
				}
			}
		}
		if got := holder.do("GET", "held"); got != "me" {
			t.Fatalf("the lock held through the attacks: GET = %q", got)
		}
	})
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i+1]
	}
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

// TestCrossProtocolRequestClosed (item 7): a web page can make a browser
// POST to the proxy's port; the body then arrives as commands. As Redis
// does, a command named POST or Host: (any case, inline or multibulk,
// alone or in a pipeline) closes the connection at once: nothing after it
// runs, and nothing of the pipeline is answered. The victim keeps its lock,
// and the proxy logs the attempt.
func TestCrossProtocolRequestClosed(t *testing.T) {
	eachFrontend(t, func(t *testing.T, fe string) {
		p := testproc.Proxy(t, "-frontend", fe)
		victim := dialRaw(t, p.Addr)
		if got := victim.do("SET", "victim", "me", "NX", "PX", "600000"); got != "+OK" {
			t.Fatalf("SET = %q", got)
		}
		body := "DEL victim\r\nSET victim attacker NX PX 60000\r\n"
		for name, in := range map[string]string{
			"curl POST": "POST / HTTP/1.1\r\nHost: " + p.Addr + "\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n" +
				"Content-Length: " + strconv.Itoa(len(body)) + "\r\nContent-Type: application/x-www-form-urlencoded\r\n\r\n" + body,
			"GET then Host:":         "GET / HTTP/1.1\r\nHost: x\r\n\r\n" + body,
			"lower-case host:":       "PING\r\nhost: x\r\n" + body,
			"multibulk post":         "*1\r\n$4\r\npOsT\r\n" + respCmd("DEL", "victim") + respCmd("SET", "victim", "attacker", "NX", "PX", "60000"),
			"multibulk Host: args":   respCmd("PING") + respCmd("HOST:", "x") + respCmd("DEL", "victim"),
			"after a complete batch": respCmd("EXISTS", "victim") + "POST /x HTTP/1.0\r\n\r\n" + body,
		} {
			out := sendAndRead(t, p.Addr, in)
			if out != "" {
				t.Errorf("%s: answered %q; the connection must close with no reply", name, out)
			}
			if got := victim.do("GET", "victim"); got != "me" {
				t.Fatalf("%s: the victim's lock is now %q", name, got)
			}
		}
		if !strings.Contains(p.Output(), "Possible SECURITY ATTACK detected") {
			t.Errorf("the proxy did not log the attack:\n%s", p.Output())
		}
	})
}

// TestTLSHandshakeOffAcceptLoop (item 9): TLS handshakes run off the
// accept loop, under a deadline, and a connection in its handshake is not
// a client yet. A silent TCP connection to the TLS port must not keep a TLS
// client from its answer, also when the proxy is full (the refusal is
// written over TLS, which needs the handshake); and 30 silent connections
// to the TLS port must not take maxclients 20 from the plain port.
func TestTLSHandshakeOffAcceptLoop(t *testing.T) {
	ca := newPKI(t, "proxy")
	cert, key := ca.issue(t, "server", true)
	tlsCfg := &tls.Config{RootCAs: ca.pool(), ServerName: "127.0.0.1"}
	eachFrontend(t, func(t *testing.T, fe string) {
		p := testproc.Proxy(t, "-frontend", fe, "-maxclients", "20", "-tls-listen", "127.0.0.1:0", "-tls-cert-file", cert, "-tls-key-file", key)
		addr := tlsAddr(t, p)
		var silent []net.Conn
		var mu sync.Mutex
		t.Cleanup(func() {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range silent {
				c.Close()
			}
		})
		dialSilent := func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			silent = append(silent, c)
			mu.Unlock()
		}
		tlsPing := func() string {
			t.Helper()
			d := &net.Dialer{Timeout: 20 * time.Second}
			c, err := tls.DialWithDialer(d, "tcp", addr, tlsCfg)
			if err != nil {
				return "handshake: " + err.Error()
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := c.Write([]byte("PING\r\n")); err != nil {
				return err.Error()
			}
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return err.Error()
			}
			return strings.TrimRight(line, "\r\n")
		}
		for i := 0; i < 30; i++ {
			dialSilent()
		}
		plain := dialRaw(t, p.Addr)
		if got := plain.do("PING"); got != "+PONG" {
			t.Fatalf("the plain port with 30 silent TLS connections and maxclients 20: %q", got)
		}
		if got := tlsPing(); got != "+PONG" {
			t.Fatalf("a TLS client behind 30 silent connections: %q", got)
		}
		// Fill the proxy: 19 more plain clients (20 with the first).
		for i := 0; i < 19; i++ {
			if got := dialRaw(t, p.Addr).do("PING"); got != "+PONG" {
				t.Fatalf("plain client %d: %q", i+2, got)
			}
		}
		dialSilent()
		if got := tlsPing(); got != "-ERR max number of clients reached" {
			t.Fatalf("a TLS client past maxclients, behind a silent connection: %q", got)
		}
		if got := plain.do("PING"); got != "+PONG" {
			t.Fatalf("a connected client after all this: %q", got)
		}
	})
}
