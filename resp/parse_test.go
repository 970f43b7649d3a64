package resp

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestParseInteger: Redis's string2ll accepts exactly the canonical decimal
// form of an int64; strconv.ParseInt also takes "+1", "01" and "-0".
func TestParseInteger(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"7", 7, true}, {"-7", -7, true}, {"100", 100, true},
		{"9223372036854775807", math.MaxInt64, true},
		{"-9223372036854775808", math.MinInt64, true},
		{"9223372036854775808", 0, false}, {"-9223372036854775809", 0, false},
		{"99999999999999999999", 0, false}, {"18446744073709551616", 0, false},
		{"", 0, false}, {"-", 0, false}, {"+1", 0, false}, {"01", 0, false},
		{"00", 0, false}, {"-0", 0, false}, {" 1", 0, false}, {"1 ", 0, false},
		{"1e3", 0, false}, {"0x10", 0, false}, {"1.0", 0, false},
	} {
		got, ok := parseInteger([]byte(c.in))
		if got != c.want || ok != c.ok {
			t.Errorf("parseInteger(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// FuzzParseInteger: whatever parseInteger accepts, strconv reads the same,
// and formatting it gives the input back (the form is canonical).
func FuzzParseInteger(f *testing.F) {
	for _, s := range []string{"0", "-1", "+1", "01", "9223372036854775807", "-9223372036854775808"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := parseInteger([]byte(s))
		want, err := strconv.ParseInt(s, 10, 64)
		canonical := err == nil && strconv.FormatInt(want, 10) == s
		if ok != canonical || (ok && n != want) {
			t.Fatalf("parseInteger(%q) = %d, %v; strconv says %d, %v (canonical %v)", s, n, ok, want, err, canonical)
		}
	})
}

// TestParseSet: SET's options as redis-server 7.0 reads them (checked
// against it by itest TestRedisParity).
func TestParseSet(t *testing.T) {
	now := func() time.Time { return time.Unix(1000, 0) }
	for _, c := range []struct {
		args []string
		ttl  time.Duration
		err  string
	}{
		{[]string{"NX", "PX", "100"}, 100 * time.Millisecond, ""},
		{[]string{"NX", "PX", "100", "PX", "200"}, 200 * time.Millisecond, ""},
		{[]string{"NX", "PX", "abc", "PX", "200"}, 200 * time.Millisecond, ""},
		{[]string{"NX", "EX", "1", "EX", "2"}, 2 * time.Second, ""},
		{[]string{"NX", "EX", "1", "PX", "2"}, 0, "ERR syntax error"},
		{[]string{"NX", "PX", "abc", "XX"}, 0, "ERR syntax error"},
		{[]string{"NX", "PX"}, 0, "ERR syntax error"},
		{[]string{"NX", "PX", "1", "KEEPTTL"}, 0, "ERR syntax error"},
		{[]string{"NX", "PX", "+100"}, 0, "ERR value is not an integer or out of range"},
		{[]string{"NX", "PX", "0100"}, 0, "ERR value is not an integer or out of range"},
		{[]string{"NX", "PX", "0"}, 0, "ERR invalid expire time in 'set' command"},
		{[]string{"NX", "PX", "-5"}, 0, "ERR invalid expire time in 'set' command"},
		{[]string{"NX", "PXAT", "999000", "PXAT", "1002000"}, 2 * time.Second, ""},
	} {
		args := [][]byte{[]byte("SET"), []byte("k"), []byte("v")}
		for _, a := range c.args {
			args = append(args, []byte(a))
		}
		a, e := parseSet(args, now)
		if e != c.err || (e == "" && a.ttl != c.ttl) {
			t.Errorf("SET k v %q: ttl %v, error %q; want %v, %q", c.args, a.ttl, e, c.ttl, c.err)
		}
	}
}

// TestMembershipGoneIsTryAgain: an acquire that reaches a lock client
// already closed (the proxy replacing its membership) is answered
// -TRYAGAIN, as every error a rejoin cures (issue 32, item 12; itest
// TestMemnodeStopAnswersTryAgain has the real sequence).
func TestMembershipGoneIsTryAgain(t *testing.T) {
	s, _ := testServer(t, "")
	for _, d := range s.cfg.Map.Domains() {
		if err := d.Client.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"SET", "k", "t", "NX", "PX", "1000"},
		{"LOCK.ACQUIRE", "k", "t", "PX", "1000"},
		{"LOCK.ACQUIRE", "k", "t", "SHARED", "PX", "1000"},
	} {
		st := newConn(s)
		b := make([][]byte, len(args))
		for i, a := range args {
			b[i] = []byte(a)
		}
		s.exec(st, b)
		st.cancel()
		if got := string(st.w.b); !strings.HasPrefix(got, "-TRYAGAIN ") {
			t.Errorf("%q on a closed membership = %q, want -TRYAGAIN", args, got)
		}
	}
}
