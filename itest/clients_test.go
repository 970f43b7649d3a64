package itest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// rawConn is one client connection speaking RESP by hand, so that a test
// knows exactly which connection sends what.
type rawConn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, r: bufio.NewReader(c)}
}

// do sends a command and returns its reply, as read returns it, or an
// error string for a closed connection.
func (rc *rawConn) do(args ...string) string {
	rc.t.Helper()
	if err := rc.write(respCmd(args...)); err != nil {
		return "closed: " + err.Error()
	}
	return rc.read()
}

// write sends raw as it is.
func (rc *rawConn) write(raw string) error {
	_ = rc.c.SetDeadline(time.Now().Add(20 * time.Second))
	_, err := io.WriteString(rc.c, raw)
	return err
}

// send writes commands as one pipeline, without reading.
func (rc *rawConn) send(cmds ...[]string) {
	rc.t.Helper()
	var b strings.Builder
	for _, args := range cmds {
		b.WriteString(respCmd(args...))
	}
	if err := rc.write(b.String()); err != nil {
		rc.t.Fatal(err)
	}
}

// read reads one reply: a status, error or integer line as is ("+OK"), a
// bulk string's content, a nil as "$-1", or an error string for a closed
// connection.
func (rc *rawConn) read() string {
	rc.t.Helper()
	_ = rc.c.SetDeadline(time.Now().Add(20 * time.Second))
	line, err := rc.r.ReadString('\n')
	if err != nil {
		return "closed: " + err.Error()
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "$") && !strings.HasPrefix(line, "=") {
		return line
	}
	n, _ := strconv.Atoi(line[1:])
	if n < 0 {
		return line // a nil: "$-1"
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(rc.r, buf); err != nil {
		return "closed: " + err.Error()
	}
	return string(buf[:n])
}

// answered reports whether a reply has arrived, without waiting for one.
func (rc *rawConn) answered() bool {
	if rc.r.Buffered() > 0 {
		return true
	}
	_ = rc.c.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := rc.r.Peek(1)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestClientListKillAndIdleTimeout: CLIENT LIST shows every connection with
// Redis's fields, CLIENT KILL closes the one it names, and the idle timeout
// closes an idle client but not one whose command waits in a lock's queue.
func TestClientListKillAndIdleTimeout(t *testing.T) {
	eachFrontend(t, func(t *testing.T, fe string) {
		p := testproc.Proxy(t, "-frontend", fe, "-timeout", "1s", "-acquire-wait", "10s")
		a, b := dialRaw(t, p.Addr), dialRaw(t, p.Addr)
		if got := a.do("CLIENT", "SETNAME", "alpha"); got != "+OK" {
			t.Fatal(got)
		}
		if got := b.do("CLIENT", "SETNAME", "beta"); got != "+OK" {
			t.Fatal(got)
		}
		if got := b.do("SET", "k", "t", "NX", "PX", "60000"); got != "+OK" {
			t.Fatal(got)
		}
		list := a.do("CLIENT", "LIST")
		lines := strings.Split(strings.TrimSpace(list), "\n")
		if len(lines) != 2 {
			t.Fatalf("CLIENT LIST with two clients:\n%s", list)
		}
		field := regexp.MustCompile(`^id=(\d+) addr=127\.0\.0\.1:\d+ laddr=127\.0\.0\.1:\d+ fd=-?\d+ name=(\w+) age=\d+ idle=\d+ flags=N db=0 .* cmd=(\S+) user=default .*resp=2 `)
		ids := map[string]string{}
		for _, l := range lines {
			m := field.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("CLIENT LIST line lacks Redis's fields: %q", l)
			}
			ids[m[2]] = m[1]
			if m[2] == "beta" && m[3] != "set" {
				t.Fatalf("beta's last command is %q, want set", m[3])
			}
		}
		if ids["alpha"] == "" || ids["beta"] == "" {
			t.Fatalf("CLIENT LIST names %v", ids)
		}
		if got := a.do("CLIENT", "LIST", "ID", ids["beta"]); !strings.Contains(got, "name=beta") || strings.Contains(got, "name=alpha") {
			t.Fatalf("CLIENT LIST ID beta:\n%s", got)
		}
		if got := a.do("CLIENT", "KILL", "ADDR", "10.0.0.1:1"); got != ":0" {
			t.Fatalf("CLIENT KILL ADDR of nobody = %q", got)
		}
		if got := a.do("CLIENT", "KILL", "10.0.0.1:1"); got != "-ERR No such client" {
			t.Fatalf("old-form CLIENT KILL of nobody = %q", got)
		}
		if got := a.do("CLIENT", "KILL", "ID", ids["beta"]); got != ":1" {
			t.Fatalf("CLIENT KILL ID beta = %q", got)
		}
		if got := b.do("PING"); !strings.HasPrefix(got, "closed") {
			t.Fatalf("the killed client still answers: %q", got)
		}

		// Idle timeout: c says nothing and is closed; w waits in a
		// lock's queue for longer than the timeout and is not; a keeps
		// talking.
		c, w := dialRaw(t, p.Addr), dialRaw(t, p.Addr)
		if got := a.do("SET", "held", "a", "NX", "PX", "60000"); got != "+OK" {
			t.Fatal(got)
		}
		if got := c.do("PING"); got != "+PONG" {
			t.Fatal(got)
		}
		waited := make(chan string, 1)
		go func() { waited <- w.do("SET", "held", "w", "NX", "PX", "60000") }()
		for i := 0; i < 10; i++ { // 3 s: three times the timeout
			time.Sleep(300 * time.Millisecond)
			if got := a.do("PING"); got != "+PONG" {
				t.Fatalf("an active client was closed: %q", got)
			}
		}
		if got := c.do("PING"); !strings.HasPrefix(got, "closed") {
			t.Fatalf("an idle client was not closed after 3 timeouts: %q", got)
		}
		if got := a.do("EVAL", casDelete, "1", "held", "a"); got != ":1" {
			t.Fatalf("release: %q", got)
		}
		if got := <-waited; got != "+OK" {
			t.Fatalf("the client waiting in the lock's queue got %q; it must not count as idle", got)
		}
	})
}
