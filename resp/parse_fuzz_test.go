package resp

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/tidwall/redcon"
)

// FuzzInlineMatchesRedcon: the inline parser splits every line as
// redcon's did (its words, its quoting and escapes, its errors), without
// its per-word copies. redcon reads a line that starts with '$' as a Tile38
// command, unlike its own server and Redis; a leading space, which both
// skip, makes it read every line as inline.
func FuzzInlineMatchesRedcon(f *testing.F) {
	for _, seed := range []string{
		`SET k v NX PX 100`, `ECHO "a b"`, `ECHO 'a\'b'`, `ECHO "a\nb\x\\"`, `ECHO "a"b`, `ECHO a"b`,
		`ECHO "unterminated`, `ECHO "esc\`, `  lots   of   spaces  `, `$x y`, ``, `""`, `"" ''`, "tab\tin word", "cr\rinside",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if strings.ContainsAny(line, "\n") || strings.HasPrefix(line, "*") {
			return
		}
		var p cmdParser
		got, used, gotErr := p.next([]byte(line + "\r\n"))
		_, want, _, _, wantErr := redcon.ReadNextCommand([]byte(" "+line+"\r\n"), nil)
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("%q: error %v, redcon's %v", line, gotErr, wantErr)
		}
		if gotErr != nil {
			if gotErr.Error() != wantErr.Error() {
				t.Fatalf("%q: error %q, redcon's %q", line, gotErr, wantErr)
			}
			return
		}
		if used != len(line)+2 {
			t.Fatalf("%q: used %d of %d bytes", line, used, len(line)+2)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %q, redcon's %q", line, got, want)
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%q: %q, redcon's %q", line, got, want)
			}
		}
	})
}

// FuzzInputMemory (issue 32, item 5): whatever a connection sends, before
// or after AUTH, the event loop allocates at most a constant plus a small
// factor of the input's size: the parser reads each byte a bounded number
// of times, and replies are written out as they fill flushAt. redcon's
// inline parser allocated the rest of the line per word, quadratic in the
// words ("a a a ... " seeds: 4 MB for 4 KB). The factor covers what replies
// cost: "a\n", 2 bytes, is answered with an 80-byte error, written once to
// the connection and once more by the test's fake connection, and the
// appends that grow the reply buffer double it.
func FuzzInputMemory(f *testing.F) {
	f.Add([]byte(strings.Repeat("a ", 2000)+"\r\n"), false)
	f.Add([]byte(strings.Repeat("a ", 2000)+"\r\n"), true)
	f.Add([]byte(strings.Repeat(`"a" `, 1000)+"\r\n"), true)
	f.Add([]byte(strings.Repeat("a\n", 2000)), false)
	f.Add([]byte("*2000\r\n"+strings.Repeat("$0\r\n\r\n", 2000)), true)
	f.Add([]byte(strings.Repeat("*0\r\n", 1000)), false)
	s := loopServer(f, func(c *Config) { c.Password = "pw" })
	f.Fuzz(func(t *testing.T, in []byte, authed bool) {
		c := newLoopClient(t, s)
		if authed {
			c.send("AUTH pw\r\n")
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c.f.in = append(c.f.in, in...)
		c.pass()
		if !c.closed {
			c.settle()
		}
		runtime.ReadMemStats(&after)
		c.hangUp()
		allocated := after.TotalAlloc - before.TotalAlloc
		out := uint64(len(c.f.out()))
		if bound := 256<<10 + 64*uint64(len(in)) + 8*out; allocated > bound {
			t.Fatalf("%d input bytes (authed %v) allocated %d bytes for %d bytes of replies, bound %d", len(in), authed, allocated, out, bound)
		}
	})
}
