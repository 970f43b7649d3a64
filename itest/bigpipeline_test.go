package itest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestBigPipelineOfLocks: a client pipelines 20,000 SET NX of free keys
// (1.2 MB) in one write, as a batch job locking its items would, and gets
// 20,000 answers, on a proxy whose lock commands wait for a memory node
// process and on a fresh embedded proxy, whose first grants wait for their
// lease horizon to be confirmed. Before, both answered "-ERR more than
// 1048576 bytes of commands are pipelined behind commands still waiting for
// their locks" and hung up, the replies of the locks already granted
// dropped: the limit meant for input piled up behind acquires waiting for
// other holders counted input behind commands waiting a round trip. Redis
// answers them all.
func TestBigPipelineOfLocks(t *testing.T) {
	const n = 20000
	// The subtests on the memory node process take keys of their own.
	pipeline := func(prefix string) string {
		var in strings.Builder
		for i := 0; i < n; i++ {
			in.WriteString(respCmd("SET", fmt.Sprintf("%s:%05d", prefix, i), "t", "NX", "PX", "60000"))
		}
		return in.String()
	}
	mn := testproc.Memnode(t)
	eachFrontend(t, func(t *testing.T, fe string) {
		for _, p := range []struct {
			name string
			args []string
		}{
			{"memory node process", []string{"-memnode", mn.Addr}},
			{"fresh embedded", nil},
		} {
			t.Run(p.name, func(t *testing.T) {
				proxy := testproc.Proxy(t, append([]string{"-frontend", fe}, p.args...)...)
				c := dialRaw(t, proxy.Addr)
				if err := c.write(pipeline(fe)); err != nil {
					t.Fatal(err)
				}
				ok, nils := 0, 0
				for i := 0; i < n; i++ {
					switch got := c.read(); got {
					case "+OK":
						ok++
					case "$-1":
						nils++ // another key's entry (docs/compatibility.md, limits)
					default:
						t.Fatalf("reply %d of %d: %q (%d OK before it)", i+1, n, got, ok)
					}
				}
				// About n²/2 of 2^21 collide with a key taken before them.
				t.Logf("%d OK, %d nil", ok, nils)
				if nils > n/10 {
					t.Errorf("%d of %d fresh keys refused", nils, n)
				}
				if got := c.do("PING"); got != "+PONG" {
					t.Fatalf("PING after the pipeline: %q", got)
				}
			})
		}
	})
}
