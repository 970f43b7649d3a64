//go:build clientsuites

package upstream

import (
	"testing"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// redislockSuite is bsm/redislock's own suite at version, dialling addr
// instead of 127.0.0.1:6379 and database 0 instead of 9 (the proxy has
// only database 0; keys are the suite's own either way).
func redislockSuite(version, addr string) suite {
	s := suite{mod: "github.com/bsm/redislock", version: version}
	for _, f := range []string{"redislock_test.go", "example_test.go"} {
		s.patches = append(s.patches, patch{f, `"127.0.0.1:6379"`, `"` + addr + `"`})
	}
	s.patches = append(s.patches, patch{"redislock_test.go", "DB:      9,", "DB:      0,"})
	return s
}

// The tests of redislock's suites that fail on the proxy, each for a
// documented difference or a named defect.
var (
	plainSET = skip{"TestLock_Release_not_own", "hands the lock to another value with a plain SET (`SET key ABCD`), which the proxy refuses: it would overwrite a lock", false}
	// Issue 33 item 2: the wait policy. redislock tries once by default.
	waitRetryFailure = skip{"TestObtain_retry_failure", "issue 33 item 2 (wait policy): a 50 ms lock, then Obtain with 2 retries 5 ms apart, which Redis refuses at once; the proxy queues the try for 4% of its 1 h TTL (2 s) and grants it when the 50 ms lock expires", true}
	waitConcurrent   = skip{"TestObtain_concurrent", "issue 33 item 2 (wait policy): 100 goroutines try one key with a 1 min TTL; each loser waits 2 s in the proxy, which exhausts go-redis's pool (20 connections, 4 s pool timeout): redis: connection pool timeout", true}
)

// Found by this suite, not part of issue 33: Example's Obtain has a 100 ms
// deadline for a new connection's first command. It failed in 1 of 6
// runs of both suites side by side (with the Go builds of the other
// suite), "redislock: not obtained", while the proxy's INFO counted the
// grant: the reply came too late. The first SET NX PX of a freshly started
// proxy on its embedded memory node takes 53 ms against 0.6 ms after
// (redis-server 0.6 ms), which is the lease being saved to state_dir
// before the grant; that a later save under disk load held this one up is
// the likely cause, not yet shown.
var exampleDeadline = skip{"Example", "its Obtain must answer within 100 ms on a new connection; an acquire that waits for the embedded memory node's lease to be saved (53 ms on a fresh proxy here, more under disk load) misses it, intermittently", true}

func TestRedislockSuites(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version string
		skips   []skip
	}{
		{"v0.9.4", []skip{plainSET, waitRetryFailure, waitConcurrent, exampleDeadline}},
		{"v0.10.0", []skip{plainSET, waitRetryFailure}},
	} {
		t.Run(tc.version, func(t *testing.T) {
			t.Parallel()
			t.Run("redis-server", func(t *testing.T) {
				s := redislockSuite(tc.version, testproc.Redis(t).Addr)
				s.run(t, s.prepare(t), nil, nil)
			})
			t.Run("proxy", func(t *testing.T) {
				s := redislockSuite(tc.version, testproc.Proxy(t).Addr)
				s.run(t, s.prepare(t), nil, tc.skips)
			})
		})
	}
}
