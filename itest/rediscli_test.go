package itest

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

func splitHostPort(a string) (string, string, error) { return net.SplitHostPort(a) }

// ttlBetween checks a TTL reply: each redis-cli run starts a process, so a
// few seconds may pass between setting a TTL and reading it back.
func ttlBetween(reply string, lo, hi int) string {
	n, err := strconv.Atoi(reply)
	if err != nil || n < lo || n > hi {
		return fmt.Sprintf("TTL %q not in [%d, %d]", reply, lo, hi)
	}
	return "ok"
}

// TestRedisCLI drives the proxy with redis-cli, the way an operator would.
func TestRedisCLI(t *testing.T) {
	p := testproc.Proxy(t, "-requirepass", "s3cret")
	host, port, _ := splitHostPort(p.Addr)
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("redis-cli", append([]string{"-h", host, "-p", port, "--no-auth-warning"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	auth := func(args ...string) string { return cli(append([]string{"-a", "s3cret"}, args...)...) }
	steps := []struct {
		got, want string
	}{
		{cli("PING"), "NOAUTH Authentication required."},
		{strings.Split(cli("-a", "wrong", "PING"), "\n")[0], "AUTH failed: WRONGPASS invalid username-password pair or user is disabled."},
		{auth("PING"), "PONG"},
		{auth("SET", "cli:k", "tok", "NX", "PX", "30000"), "OK"},
		{auth("SET", "cli:k", "tok2", "NX", "PX", "30000"), ""},
		{auth("GET", "cli:k"), "tok"},
		{auth("EXISTS", "cli:k"), "1"},
		{ttlBetween(auth("TTL", "cli:k"), 20, 30), "ok"},
		{auth("PEXPIRE", "cli:k", "60000"), "1"},
		{ttlBetween(auth("TTL", "cli:k"), 50, 60), "ok"},
		{auth("DEL", "cli:k"), "1"},
		{auth("GET", "cli:k"), ""},
		{auth("PTTL", "cli:k"), "-2"},
		{auth("LOCK.ACQUIRE", "cli:f", "a", "PX", "5000"), "1"},
		{auth("LOCK.RELEASE", "cli:f", "a"), "1"},
		{auth("LOCK.ACQUIRE", "cli:f", "b", "PX", "5000"), "2"},
		{auth("LOCK.EXTEND", "cli:f", "b", "PX", "9000"), "1"},
		{auth("LOCK.EXTEND", "cli:f", "a", "PX", "9000"), "0"},
		{auth("SELECT", "0"), "OK"},
		{auth("SELECT", "1"), "OK"},
		{auth("SELECT", "16"), "ERR DB index is out of range"},
		{auth("LPUSH", "l", "x"), "ERR unknown command 'lpush', with args beginning with: 'l' 'x' (this is shiftlock-proxy, a lock proxy: it serves SET NX, GET, DEL, PEXPIRE, PTTL, EXISTS, the lock scripts of common clients and LOCK.*; keep data in a real Redis)"},
	}
	for i, s := range steps {
		if s.got != s.want {
			t.Errorf("step %d: got %q, want %q", i, s.got, s.want)
		}
	}
	info := auth("INFO", "server")
	if !strings.Contains(info, "redis_mode:standalone") || !strings.Contains(info, "redis_version:") {
		t.Errorf("INFO server: %q", info)
	}
	if strings.Contains(info, "# Locks") {
		t.Errorf("INFO server returned other sections: %q", info)
	}
	if li := auth("LOCK.INFO", "cli:f"); !strings.Contains(li, "exclusive") || !strings.Contains(li, "held") {
		t.Errorf("LOCK.INFO: %q", li)
	}
}
