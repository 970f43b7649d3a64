//go:build clientsuites

// Package upstream runs the recognised Go lock clients' own test suites,
// as their authors wrote them, against the proxy and against redis-server
// (`make test-clients`; the build tag keeps them out of `go test ./...`).
//
// Each suite comes from the Go module cache (`go mod download`, which the
// module proxy fills when needed), is copied into a temporary directory,
// and gets only its harness patched: the address it dials, the database
// number, and for redsync the servers its TestMain starts (tempredis,
// replaced by ./tempredis, which starts a proxy or a redis-server on the
// port the suite asks for). Their code is never committed here.
//
// A suite runs against redis-server whole, which shows the patched harness
// is sound, and against the proxy with the tests in its `differs` list
// skipped: every one of them is a documented difference from Redis
// (docs/compatibility.md, "Upstream test suites") or a named defect of
// issue 33. A test that fails and is not listed fails the run.
package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// patch replaces old with new in file, and fails if old is not there: an
// upstream change to the harness must be looked at, not papered over.
type patch struct{ file, old, new string }

// skip is a test of the suite that fails on the proxy, and why: a
// documented difference from Redis, or a named defect (defect) that is to
// be fixed.
type skip struct {
	test, why string
	defect    bool
}

// suite is one module's test suite.
type suite struct {
	mod, version string
	patches      []patch
}

// moduleDir is where the module cache holds mod@version.
func moduleDir(t *testing.T, mod, version string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod+"@"+version)
	cmd.Dir = t.TempDir() // outside any module: the download is by version only
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s@%s: %v\n%s", mod, version, err, out)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
		t.Fatalf("go mod download %s@%s: %v %s", mod, version, err, info.Error)
	}
	return info.Dir
}

// copyTree copies src into dst, writable (the module cache is read-only).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// prepare copies s's module into a temporary directory and patches its
// harness.
func (s suite) prepare(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "suite")
	copyTree(t, moduleDir(t, s.mod, s.version), dir)
	for _, p := range s.patches {
		f := filepath.Join(dir, p.file)
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(p.old)) {
			t.Fatalf("%s@%s %s: %q not found; the harness changed upstream", s.mod, s.version, p.file, p.old)
		}
		if err := os.WriteFile(f, bytes.ReplaceAll(b, []byte(p.old), []byte(p.new)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var testLine = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+)`)

// run runs the suite in dir with env, the tests of skips left out, and
// fails t if any test fails. Then it runs the skipped tests on their own
// and logs how each fared: a documented difference that passes fails t
// (the list must stay true); a named defect that passes is only logged,
// since some of them show only under load.
func (s suite) run(t *testing.T, dir string, env []string, skips []skip) {
	t.Helper()
	var names []string
	for _, d := range skips {
		names = append(names, "^"+regexp.QuoteMeta(d.test)+"$")
	}
	args := []string{"-timeout", "8m"}
	if len(names) > 0 {
		args = append(args, "-skip", strings.Join(names, "|"))
	}
	res, out, err := goTest(dir, env, args)
	t.Logf("%s@%s: %d passed, %d failed, %d skipped in %v", s.mod, s.version,
		res.counts["PASS"], res.counts["FAIL"], res.counts["SKIP"], res.took)
	if err != nil {
		t.Fatalf("go test %s: %v; failed: %v\n%s", strings.Join(args, " "), err, res.failed, digest(out))
	}
	if len(skips) == 0 {
		return
	}
	res, out, _ = goTest(dir, env, []string{"-timeout", "5m", "-run", strings.Join(names, "|")})
	for _, d := range skips {
		switch {
		case !res.passed[d.test]:
			t.Logf("left out, fails as listed: %s: %s", d.test, d.why)
		case d.defect:
			t.Logf("left out, but passed this time: %s: %s", d.test, d.why)
		default:
			t.Errorf("%s is listed as a difference from Redis but passes: %s\n%s", d.test, d.why, tail(out, 60))
		}
	}
}

// result is what one go test run reported.
type result struct {
	counts map[string]int
	passed map[string]bool
	failed []string
	took   time.Duration
}

// goTest runs `go test -count=1 -v args .` in dir with env. It kills
// whatever the run left behind: the suite's servers live in the process
// group of its go test.
func goTest(dir string, env, args []string) (result, string, error) {
	cmd := exec.Command("go", append(append([]string{"test", "-count=1", "-v"}, args...), ".")...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOFLAGS=-mod=mod"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Start()
	if err == nil {
		err = cmd.Wait()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	res := result{counts: map[string]int{}, passed: map[string]bool{}, took: time.Since(start).Round(time.Second)}
	for _, line := range strings.Split(out.String(), "\n") {
		if m := testLine.FindStringSubmatch(line); m != nil {
			res.counts[m[1]]++
			switch m[1] {
			case "FAIL":
				res.failed = append(res.failed, m[2])
			case "PASS":
				res.passed[m[2]] = true
			}
		}
	}
	sort.Strings(res.failed)
	return res, out.String(), err
}

// digest is the end of a failed run's output before any goroutine dump
// (a timeout's panic lists the tests still running just before it), so
// that the dump does not bury the failure.
func digest(out string) string {
	if i := strings.Index(out, "\ngoroutine "); i >= 0 {
		out = out[:i] + "\n(goroutine dump left out)"
	}
	return tail(out, 150)
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var (
	portMu sync.Mutex
	// Below Linux's ephemeral range (32768 up), where ports picked by the
	// kernel for other tests' listeners and connections would race ours.
	portNext = 20000 + int(time.Now().UnixNano()%10000)
)

// freeBlock finds n consecutive loopback ports that are free now, never
// the same block twice in one test process (suites run in parallel).
func freeBlock(t *testing.T, n int) int {
	t.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	for base := portNext; base+n < 32768; base += n {
		ok := true
		var ls []net.Listener
		for i := 0; i < n && ok; i++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+i))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if ok {
			portNext = base + n
			return base
		}
	}
	t.Fatal("no block of free ports")
	return 0
}
