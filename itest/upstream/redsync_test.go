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
		{"proxy-memnode", []skip{redsyncPlainSET}, func(t *testing.T) []string {
			return []string{"SHIFTLOCK_TEMPREDIS_SERVER=proxy", "SHIFTLOCK_PROXY_BIN=" + testproc.Bin(t, "proxy"),
				"SHIFTLOCK_MEMNODE_BIN=" + testproc.Bin(t, "memnode"), "SHIFTLOCK_MEMNODE_ARGS=-max-lease 2h",
				"SHIFTLOCK_PROXY_ARGS=-redlock-quorum"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := freeBlock(t, 48)
			s := redsyncSuite(base)
			dir := prepareRedsync(t, s)
			env := append(tc.env(t), "SHIFTLOCK_TEMPREDIS_BASE="+strconv.Itoa(base), "SHIFTLOCK_TEMPREDIS_BLOCK=8")
			s.run(t, dir, env, tc.skips)
		})
	}
}
