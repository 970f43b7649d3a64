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
)

// TestObtain_retry_failure and TestObtain_concurrent were left out until
// issue 33 item 2: the proxy queued redislock's single try for 2 s. With
// the wait policy (a first try is answered at once, a retry waits at most
// the gap since its refusal) they run on the proxy as on redis-server.

// exampleDeadline is redislock's Example, in both versions: it obtains a
// lock with a 100 ms TTL, sleeps 50 ms, and refreshes it. When the process
// is not scheduled for another 50 ms the lock has lapsed and Refresh says
// "redislock: not obtained". That happened against redis-server itself in
// a clean-clone CI run on two loaded cores (2026-11-27), so it is left out
// of both, like retryDeadline. (It had been left out on the proxy alone,
// with the first grant's lease save (53 ms on a fresh proxy) suspected;
// the redis-server failure shows the race needs no proxy.)
// retryDeadline is redislock v0.10.0's own race, on redis-server as on
// the proxy: Obtain runs under a 20 ms context with retries 5 ms apart,
// and the test wants ErrNotObtained wrapped around the deadline; when the
// deadline falls during a round trip instead of a backoff, Obtain returns
// the bare context.DeadlineExceeded. On two loaded cores it failed 1 run of
// 4 against redis-server itself (2026-11-27), so it is left out of both.
var retryDeadline = skip{"TestObtain_retry_context_deadline", "redislock's own timing race: a 20 ms Obtain context whose deadline can fall during a round trip, not a backoff, and then is not wrapped in ErrNotObtained; it fails against redis-server too on a loaded machine", true}

// quickExpired are v0.10.0's tests that obtain a 5 ms lock first: Obtain's
// context deadline is then the TTL, 5 ms after the call, and a round trip
// later than that on two loaded cores fails the Obtain ("context deadline
// exceeded") before the test begins. TestLock_Release_expired failed so
// once against the proxy in a clean-clone CI run (2026-11-29) whose other
// runs of the same code passed; the race needs no proxy, so it is left out
// of both, like retryDeadline.
var quickExpired = []skip{
	{"TestLock_Release_expired", "redislock's own timing race: Obtain of a 5 ms lock runs under a 5 ms context deadline, which a loaded machine's round trip can miss", true},
	{"TestLock_Refresh_expired", "redislock's own timing race: Obtain of a 5 ms lock runs under a 5 ms context deadline, which a loaded machine's round trip can miss", true},
}

var exampleDeadline = skip{"Example", "redislock's own timing race: a 100 ms lock is refreshed after a 50 ms sleep, and lapses first when the process waits 50 ms more to be scheduled; it fails against redis-server too on a loaded machine", true}

func TestRedislockSuites(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version    string
		skips      []skip
		redisSkips []skip
	}{
		{"v0.9.4", []skip{plainSET, exampleDeadline}, []skip{exampleDeadline}},
		{"v0.10.0", append([]skip{plainSET, retryDeadline, exampleDeadline}, quickExpired...), append([]skip{retryDeadline, exampleDeadline}, quickExpired...)},
	} {
		t.Run(tc.version, func(t *testing.T) {
			t.Parallel()
			t.Run("redis-server", func(t *testing.T) {
				s := redislockSuite(tc.version, testproc.Redis(t).Addr)
				s.run(t, s.prepare(t), nil, tc.redisSkips)
			})
			t.Run("proxy", func(t *testing.T) {
				s := redislockSuite(tc.version, testproc.Proxy(t).Addr)
				s.run(t, s.prepare(t), nil, tc.skips)
			})
		})
	}
}
