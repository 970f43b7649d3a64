package itest

import (
	"regexp"
	"strings"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// exchange sends raw followed by a PING on a new connection, and returns
// the reply lines up to the PONG, or up to the connection's end
// (marked "<closed>"). Every reply it is used for is one line.
func exchange(t *testing.T, addr, raw string) []string {
	t.Helper()
	c := dialRaw(t, addr)
	defer c.c.Close()
	if err := c.write(raw + "PING\r\n"); err != nil {
		return []string{"<closed>"}
	}
	var out []string
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			return append(out, "<closed>")
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "+PONG" {
			return out
		}
		out = append(out, line)
	}
}

// bigInt hides the exact value of large integer replies (TTLs), which
// differ by the time between two servers' answers.
var bigInt = regexp.MustCompile(`^:[1-9][0-9]{2,}$`)

func normalize(lines []string) string {
	out := make([]string, len(lines))
	for i, l := range lines {
		if bigInt.MatchString(l) {
			l = ":<large>"
		}
		out[i] = l
	}
	return strings.Join(out, " | ")
}

// TestRedisParity (issue 32, item 12): inputs where the proxy answered
// differently from redis-server 7, sent to both, each on a new connection
// followed by a PING. The proxy must answer as Redis does: an empty or
// null multibulk is skipped, not a reason to close the connection; a TTL
// with a plus sign or a leading zero is not an integer (Redis's
// string2ll); SET with the same unit twice takes the last, and only the
// last value is read, while two different units are a syntax error.
func TestRedisParity(t *testing.T) {
	rs := testproc.Redis(t)
	cases := []string{
		"*0\r\n",
		"*-1\r\n",
		"*-5\r\n",
		"*0\r\n*-1\r\n" + respCmd("SET", "p0", "v", "NX", "PX", "60000"),
		respCmd("SET", "p1", "v", "NX", "PX", "+100"),
		respCmd("SET", "p2", "v", "NX", "PX", "0100"),
		respCmd("SET", "p3", "v", "NX", "PX", "-0"),
		respCmd("SET", "p4", "v", "NX", "EX", "+1"),
		respCmd("SET", "p5", "v", "NX", "PX", "100", "PX", "200000") + respCmd("PTTL", "p5"),
		respCmd("SET", "p6", "v", "NX", "PX", "abc", "PX", "200000") + respCmd("PTTL", "p6"),
		respCmd("SET", "p7", "v", "NX", "EX", "1", "EX", "200") + respCmd("TTL", "p7"),
		respCmd("SET", "p8", "v", "NX", "EX", "1", "PX", "100"),
		respCmd("SET", "p9", "v", "NX", "PX", "abc", "XX"),
		respCmd("SET", "p10", "v", "NX", "PX"),
		respCmd("SET", "p11", "v", "NX", "PX", "0"),
		respCmd("SET", "p12", "v", "NX", "NX", "PX", "60000"),
		respCmd("SET", "p13", "v", "NX", "PX", "60000") + respCmd("PEXPIRE", "p13", "+100") + respCmd("PEXPIRE", "p13", "0100"),
	}
	sameAsRedis(t, rs, cases)
}

// sameAsRedis sends each of cases to redis-server rs and to a proxy of
// each front end, each on a new connection followed by a PING, and
// reports every difference in the replies.
func sameAsRedis(t *testing.T, rs *testproc.Proc, cases []string) {
	eachFrontend(t, func(t *testing.T, fe string) {
		p := testproc.Proxy(t, "-frontend", fe)
		flush := dialRaw(t, rs.Addr)
		for _, raw := range cases {
			// Fresh keys on redis-server for each front end.
			if got := flush.do("FLUSHALL"); got != "+OK" {
				t.Fatalf("FLUSHALL on redis-server: %q", got)
			}
			want := normalize(exchange(t, rs.Addr, raw))
			got := normalize(exchange(t, p.Addr, raw))
			if got != want {
				t.Errorf("%q:\n  proxy:        %s\n  redis-server: %s", raw, got, want)
			}
		}
	})
}

// TestLockOptionsOnce (issue 32, item 12): LOCK.ACQUIRE's options are the
// project's own, with no Redis precedent to follow, so a repeated or
// conflicting option is a syntax error that names it, rather than a guess
// at what the client meant; numbers follow Redis's integer syntax.
func TestLockOptionsOnce(t *testing.T) {
	eachFrontend(t, func(t *testing.T, fe string) {
		p := testproc.Proxy(t, "-frontend", fe)
		c := dialRaw(t, p.Addr)
		for _, bad := range [][]string{
			{"LOCK.ACQUIRE", "o1", "t", "SHARED", "SHARED"},
			{"LOCK.ACQUIRE", "o2", "t", "PX", "100", "PX", "200"},
			{"LOCK.ACQUIRE", "o3", "t", "PX", "100", "EX", "2"},
			{"LOCK.ACQUIRE", "o4", "t", "WAIT", "1", "wait", "2"},
			{"LOCK.RANGE.ACQUIRE", "r", "0", "9", "t", "shared", "SHARED"},
			{"LOCK.RANGE.ACQUIRE", "r", "0", "9", "t", "PX", "100", "EX", "1"},
		} {
			if got := c.do(bad...); !strings.HasPrefix(got, "-ERR syntax error") {
				t.Errorf("%q = %q, want a syntax error", bad, got)
			}
		}
		for _, bad := range [][]string{
			{"LOCK.ACQUIRE", "o5", "t", "PX", "+100"},
			{"LOCK.ACQUIRE", "o6", "t", "WAIT", "010"},
			{"LOCK.EXTEND", "o7", "t", "PX", "+100"},
		} {
			if got := c.do(bad...); !strings.HasPrefix(got, "-ERR") {
				t.Errorf("%q = %q, want an error", bad, got)
			}
		}
		for _, k := range []string{"o1", "o2", "o3", "o4", "o5", "o6"} {
			if got := c.do("EXISTS", k); got != ":0" {
				t.Errorf("a refused LOCK.ACQUIRE took %s: EXISTS = %q", k, got)
			}
		}
		if got := c.do("LOCK.ACQUIRE", "o8", "t", "SHARED", "PX", "60000", "WAIT", "0"); !strings.HasPrefix(got, ":") {
			t.Errorf("each option once = %q, want a fence", got)
		}
	})
}
