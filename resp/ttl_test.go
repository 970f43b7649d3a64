package resp

import (
	"strings"
	"testing"
)

// TestTTLOptions runs the TTL options of SET, LOCK.ACQUIRE and LOCK.EXTEND
// through one server, each on a fresh key. The replies are those the
// commands gave before their TTLs had one parser (issue 34), except for an
// EX whose seconds overflow a time.Duration in the LOCK commands: that
// multiplied past int64 and took a wrapped TTL (EX 20000000000, 634 years,
// held for 49), where SET answers Redis's invalid expire time.
func TestTTLOptions(t *testing.T) {
	s, _ := testServer(t, "")
	for i, c := range []struct {
		args []string
		want string // a reply prefix
	}{
		{[]string{"SET", "k", "t", "NX", "PX", "100"}, "+OK"},
		{[]string{"SET", "k", "t", "NX", "EX", "1", "EX", "2"}, "+OK"},
		{[]string{"SET", "k", "t", "NX", "PX", "+100"}, "-ERR value is not an integer or out of range"},
		{[]string{"SET", "k", "t", "NX", "PX", "0"}, "-ERR invalid expire time in 'set' command"},
		{[]string{"SET", "k", "t", "NX", "PX", "-5"}, "-ERR invalid expire time in 'set' command"},
		{[]string{"SET", "k", "t", "NX", "EX", "9223372036854775807"}, "-ERR invalid expire time in 'set' command"},
		{[]string{"SET", "k", "t", "NX", "EX", "20000000000"}, "-ERR invalid expire time in 'set' command"},
		{[]string{"SET", "k", "t", "NX", "PXAT", "1"}, "+OK"},
		{[]string{"LOCK.ACQUIRE", "k", "t", "PX", "100"}, ":"},
		{[]string{"LOCK.ACQUIRE", "k", "t", "EX", "1"}, ":"},
		{[]string{"LOCK.ACQUIRE", "k", "t", "PX", "0"}, "-ERR invalid expire time in 'lock.acquire' command"},
		{[]string{"LOCK.ACQUIRE", "k", "t", "PX", "-5"}, "-ERR value is not an integer or out of range"},
		{[]string{"LOCK.ACQUIRE", "k", "t", "PX", "+5"}, "-ERR value is not an integer or out of range"},
		{[]string{"LOCK.ACQUIRE", "k", "t", "PX", "1099511627777"}, "-ERR value is not an integer or out of range"},
		{[]string{"LOCK.ACQUIRE", "k", "t", "PX", "1", "EX", "1"}, "-ERR syntax error: one TTL at most"},
		{[]string{"LOCK.ACQUIRE", "k", "t", "EX", "20000000000"}, "-ERR invalid expire time in 'lock.acquire' command"},
		{[]string{"LOCK.ACQUIRE", "k", "t", "EX", "1099511627776"}, "-ERR invalid expire time in 'lock.acquire' command"},
		{[]string{"LOCK.EXTEND", "k", "t", "PX", "100"}, ":0"},
		{[]string{"LOCK.EXTEND", "k", "t", "XX", "100"}, "-ERR syntax error (LOCK.EXTEND key token PX ms)"},
		{[]string{"LOCK.EXTEND", "k", "t", "PX", "-1"}, "-ERR syntax error (LOCK.EXTEND key token PX ms)"},
		{[]string{"LOCK.EXTEND", "k", "t", "EX", "x"}, "-ERR syntax error (LOCK.EXTEND key token PX ms)"},
		{[]string{"LOCK.EXTEND", "k", "t", "EX", "20000000000"}, "-ERR invalid expire time in 'lock.extend' command"},
	} {
		args := make([][]byte, len(c.args))
		for j, a := range c.args {
			args[j] = []byte(a)
		}
		args[1] = []byte("k" + strings.Repeat("x", i)) // a fresh key per case
		st := newConn(s)
		s.exec(st, args)
		st.cancel()
		if got := string(st.w.b); !strings.HasPrefix(got, c.want) {
			t.Errorf("%q = %q, want %q...", c.args, got, c.want)
		}
	}
}
