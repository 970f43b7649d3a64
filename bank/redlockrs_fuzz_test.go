package bank

import (
	"bufio"
	"strings"
	"testing"
)

// FuzzReadReply: whatever a server answers, the redlock-rs locker's reply
// reader returns a reply or an error, and never panics or reads past one
// reply's worth of a bulk string it was promised.
func FuzzReadReply(f *testing.F) {
	for _, s := range []string{"+OK\r\n", "-NOSCRIPT No matching script\r\n", ":1\r\n", "$-1\r\n", "$5\r\nhello\r\n",
		"$3\r\nab", "*1\r\n$1\r\na\r\n", "+\r\n", ":x\r\n", "$99999999999\r\n", "\r\n", "$-7\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := readReply(bufio.NewReader(strings.NewReader(s)))
		if err == nil && s[0] == '$' && !r.null && len(r.str) > len(s) {
			t.Fatalf("bulk of %d bytes from %d bytes of input", len(r.str), len(s))
		}
	})
}
