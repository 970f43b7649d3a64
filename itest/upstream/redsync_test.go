//go:build clientsuites

package upstream

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// redsyncSuite is go-redsync/redsync's own suite at the version go.mod
// pins. Its TestMain starts 48 servers (8 for each of its 6 drivers) on
// ports from 51200 with tempredis; the harness moves them to a free block
// of ports and replaces tempredis with ./tempredis.
func redsyncSuite(base int) suite {
	b := strconv.Itoa(base)
	return suite{
		mod: "github.com/go-redsync/redsync/v4", version: "v4.18.1",
		patches: []patch{
			{"redsync_test.go", `"port": strconv.Itoa(51200 + i),`, `"port": strconv.Itoa(` + b + ` + i),`},
			{"redsync_test.go", `strconv.Itoa(51200+i+offset)`, `strconv.Itoa(` + b + `+i+offset)`},
			{"redsync_test.go", `redigolib.Dial("unix", server.Socket())`, `redigolib.Dial("tcp", server.Socket())`},
			{"redsync_test.go", `Network: "unix",`, `Network: "tcp",`},
			{"scripts_test.go", `Network: "unix",`, `Network: "tcp",`},
		},
	}
}

var (
	redsyncPlainSET = skip{"TestMutexQuorum", "clogs some servers with a plain SET (`SET key foobar`), which the proxy refuses: it would overwrite a lock; the test then panics", false}
	// Issue 33 item 3, which itest TestExtendRacesAcrossProxies reproduces.
	redsyncExtendRace = skip{"TestSetNXOnExtendAcquiresLockWhenKeyIsExpired", "issue 33 item 3: the touch-or-acquire script through 8 proxies on one memory node at once is answered 0 by some when owner recognition outlasts the 20 ms wait budget (under load)", true}
)

// prepareRedsync patches the suite and swaps in the tempredis shim.
func prepareRedsync(t *testing.T, s suite) string {
	t.Helper()
	dir := s.prepare(t)
	copyTree(t, "tempredis", filepath.Join(dir, "_tempredis"))
	cmd := exec.Command("go", "mod", "edit", "-replace=github.com/stvp/tempredis=./_tempredis")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go mod edit: %v\n%s", err, out)
	}
	return dir
}

func TestRedsyncSuite(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("tempredis/tempredis.go"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		skips []skip
		env   func(t *testing.T) []string
	}{
		{"redis-server", nil, func(t *testing.T) []string { return []string{"SHIFTLOCK_TEMPREDIS_SERVER=redis"} }},
		// 48 proxies, each on its embedded memory node: a RedLock client's
		// instances on 48 hosts.
		{"proxy-embedded", []skip{redsyncPlainSET}, func(t *testing.T) []string {
			return []string{"SHIFTLOCK_TEMPREDIS_SERVER=proxy", "SHIFTLOCK_PROXY_BIN=" + testproc.Bin(t, "proxy")}
		}},
		// Each driver's 8 servers are 8 proxies on one memnode, with
		// -redlock-quorum: a RedLock client's instances sharing one memory
		// node. The suite takes locks for an hour (TestValid), so the
		// memnode allows leases that long.
		{"proxy-memnode", []skip{redsyncPlainSET, redsyncExtendRace}, func(t *testing.T) []string {
			return []string{"SHIFTLOCK_TEMPREDIS_SERVER=proxy", "SHIFTLOCK_PROXY_BIN=" + testproc.Bin(t, "proxy"),
				"SHIFTLOCK_MEMNODE_BIN=" + testproc.Bin(t, "memnode"), "SHIFTLOCK_MEMNODE_ARGS=-max-lease 2h",
				"SHIFTLOCK_PROXY_ARGS=-redlock-quorum"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.name == "proxy-memnode" && os.Getenv("SHIFTLOCK_KNOWN_EXTEND_RACE") == "1" {
				// Besides item 3, this topology hung once in five runs of
				// make test-clients (on a clean clone, beside the other
				// suites): 14 tests passed, then none until the suite's
				// timeout, with rueidis's and go-redis's readers waiting for
				// replies from the proxies. Which test hung is not known
				// (the harness now keeps the timeout's list of running
				// tests). Whoever fixes item 3 runs this variant again.
				t.Skip("known defect, issue 33 item 3, and an intermittent hang (SHIFTLOCK_KNOWN_EXTEND_RACE=1; unset it to run this variant)")
			}
			base := freeBlock(t, 48)
			s := redsyncSuite(base)
			dir := prepareRedsync(t, s)
			env := append(tc.env(t), "SHIFTLOCK_TEMPREDIS_BASE="+strconv.Itoa(base), "SHIFTLOCK_TEMPREDIS_BLOCK=8")
			s.run(t, dir, env, tc.skips)
		})
	}
}
