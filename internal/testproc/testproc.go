// Package testproc starts the project's real binaries and real third-party
// servers (redis-server) as processes for integration tests, and stops them
// when the test ends. Nothing here is a mock: tests that use it exercise
// exactly what a user runs.
package testproc

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/freeport"
)

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]error{}
)

// Root is the directory of the shiftlock-proxy module, found by walking up
// from the working directory, so that tests in nested modules (which pin
// other versions of client libraries) build the same binaries.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.Contains(string(b), "module github.com/shiftlock/shiftlock-proxy\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("the shiftlock-proxy module is not above %s", dir)
		}
		dir = parent
	}
}

// BinEnv names the environment variable that points tests at binaries
// built beforehand instead of building cmd/<name> themselves: make
// test-verbs builds them with -tags verbs on the host and runs the tests in
// a guest with no Go toolchain.
const BinEnv = "SHIFTLOCK_TEST_BIN"

// Bin builds cmd/<name> (or bench/cmd/<name>) once per test process and returns its path (or
// returns $SHIFTLOCK_TEST_BIN/<name>, see BinEnv).
func Bin(t testing.TB, name string) string {
	t.Helper()
	if dir := os.Getenv(BinEnv); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v", BinEnv, dir, err)
		}
		return p
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir == "" {
		dir, err := os.MkdirTemp("", "shiftlock-bin-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = dir
	}
	err, done := built[name]
	if !done {
		root, rerr := Root()
		if rerr != nil {
			t.Fatal(rerr)
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(buildDir, name), "./cmd/"+name)
		cmd.Dir = root
		// The evaluation wing's commands build in their own module.
		if _, serr := os.Stat(filepath.Join(root, "cmd", name)); serr != nil {
			cmd.Dir = filepath.Join(root, "bench")
		}
		if out, cerr := cmd.CombinedOutput(); cerr != nil {
			err = fmt.Errorf("go build ./cmd/%s in %s: %v\n%s", name, cmd.Dir, cerr, out)
		}
		built[name] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(buildDir, name)
}

// Proc is a running process.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	// Addr is the address the process said it listens on.
	Addr string
	log  *lineLog
	done chan struct{}
	err  error
}

type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) add(s string) {
	l.mu.Lock()
	if len(l.lines) < 5000 {
		l.lines = append(l.lines, s)
	}
	l.mu.Unlock()
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// Output is what the process printed so far (stdout and stderr).
func (p *Proc) Output() string { return p.log.String() }

// Start runs bin with args and waits until a line matching ready appears on
// stdout or stderr; its last submatch becomes Addr. The process is killed when t ends.
func Start(t testing.TB, name, bin string, args []string, ready *regexp.Regexp) *Proc {
	t.Helper()
	p, err := Launch(name, bin, args, ready, Slow(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("--- %s output ---\n%s", name, tail(p.Output(), 60))
		}
	})
	return p
}

// Launch is Start without a test: the caller must Kill or Stop the process.
func Launch(name, bin string, args []string, ready *regexp.Regexp, timeout time.Duration) (*Proc, error) {
	p := &Proc{Name: name, Cmd: exec.Command(bin, args...), log: &lineLog{}, done: make(chan struct{})}
	stdout, _ := p.Cmd.StdoutPipe()
	stderr, _ := p.Cmd.StderrPipe()
	if err := p.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	addr := make(chan string, 1)
	var wg sync.WaitGroup
	scan := func(r io.Reader, watch bool) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.log.add(line)
			if watch {
				if m := ready.FindStringSubmatch(line); m != nil {
					select {
					case addr <- m[len(m)-1]:
					default:
					}
				}
			}
		}
	}
	wg.Add(2)
	go scan(stdout, true)
	go scan(stderr, true) // etcd says it is ready on stderr
	go func() {
		wg.Wait()
		p.err = p.Cmd.Wait()
		close(p.done)
	}()
	select {
	case p.Addr = <-addr:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited before it was ready: %v\n%s", name, p.err, tail(p.Output(), 40))
	case <-time.After(timeout):
		p.Kill()
		return nil, fmt.Errorf("%s not ready after %v\n%s", name, timeout, tail(p.Output(), 40))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) {
	if p.Cmd.Process != nil {
		_ = p.Cmd.Process.Signal(sig)
	}
}

// Freeze stops the process (SIGSTOP) and returns once every thread of it
// has stopped. kill(2) returns before that: the kernel starts a group stop
// in one thread, which must be scheduled first, and the others run user
// code until it has. On a loaded machine a stopped memory node answered a
// verb 3 ms after the signal was sent.
func (p *Proc) Freeze() error {
	p.Signal(syscall.SIGSTOP)
	if p.Cmd.Process == nil {
		return fmt.Errorf("%s: not started", p.Name)
	}
	dir := fmt.Sprintf("/proc/%d/task", p.Cmd.Process.Pid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		running, err := runningThreads(dir)
		if err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d threads still running 10 s after SIGSTOP", p.Name, running)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThreads counts the threads under a /proc/<pid>/task directory that
// are not stopped.
func runningThreads(dir string) (int, error) {
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, task := range tasks {
		stat, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue // the thread exited
		}
		// "tid (comm) state ...": comm may hold spaces and parentheses.
		rest := stat[bytes.LastIndexByte(stat, ')')+1:]
		if f := bytes.Fields(rest); len(f) == 0 || (f[0][0] != 'T' && f[0][0] != 't') {
			n++
		}
	}
	return n, nil
}

// Kill is kill -9, and waits for the process to be gone.
func (p *Proc) Kill() {
	p.Signal(syscall.SIGCONT) // a stopped process cannot die otherwise
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to d for a clean exit, returning its error.
func (p *Proc) Stop(d time.Duration) error {
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		p.Kill()
		return fmt.Errorf("%s did not exit within %v of SIGTERM", p.Name, d)
	}
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

var (
	// MemnodeReady and ProxyReady match the line each binary prints once it
	// serves, capturing the address.
	MemnodeReady = regexp.MustCompile(`memnode listening on (\S+)`)
	ProxyReady   = regexp.MustCompile(`proxy listening on (\S+)`)
)

// Memnode starts cmd/memnode on a free loopback port, with a state
// directory of its own unless args keep the state in etcd or name one.
func Memnode(t testing.TB, args ...string) *Proc {
	t.Helper()
	base := []string{"-listen", "127.0.0.1:0", "-metrics", ""}
	if !hasFlag(args, "etcd", "state-dir") {
		base = append(base, "-state-dir", t.TempDir())
	}
	return Start(t, "memnode", Bin(t, "memnode"), append(base, args...), MemnodeReady)
}

// VerbsDeviceEnv names the RDMA device that tests of the verbs fabric
// (built with -tags verbs) run on; make test-verbs sets it to the guest's
// soft-RoCE device.
const VerbsDeviceEnv = "SHIFTLOCK_VERBS_DEVICE"

// VerbsDevice is $SHIFTLOCK_VERBS_DEVICE. A verbs test without it fails
// rather than skips: it exists to run against a device.
func VerbsDevice(t testing.TB) string {
	t.Helper()
	d := os.Getenv(VerbsDeviceEnv)
	if d == "" {
		t.Fatalf("%s is not set: name the RDMA device to test on (make test-verbs runs these tests against soft-RoCE in a guest)", VerbsDeviceEnv)
	}
	return d
}

// SlowdownEnv names a factor (a positive integer, 1 when unset) by which
// tests stretch their deadlines on work: the contexts and waits that only
// stop a hung test, never a bound a test asserts. make test-verbs sets it in
// its qemu guest, where emulation (TCG) on a loaded host runs the same work
// ten or more times slower than natively (issue 36: the conformance suite's
// 400 atomics took 0.6-9 s in the guest, and more than 20 s at a host load
// of 14). Elsewhere it stays unset, so that a hang on a native fabric still
// ends a test quickly.
const SlowdownEnv = "SHIFTLOCK_TEST_SLOWDOWN"

// Slow is d stretched by $SHIFTLOCK_TEST_SLOWDOWN. A value that is not a
// positive integer panics: a typo must not silently leave the guest's
// deadlines at their native values.
func Slow(d time.Duration) time.Duration {
	v := os.Getenv(SlowdownEnv)
	if v == "" {
		return d
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		panic(fmt.Sprintf("%s=%q: want a positive integer", SlowdownEnv, v))
	}
	return d * time.Duration(n)
}

// VerbsMemnode starts cmd/memnode serving its regions over RDMA on
// VerbsDevice (the binary must be built with -tags verbs: see BinEnv).
func VerbsMemnode(t testing.TB, args ...string) *Proc {
	t.Helper()
	return Memnode(t, append([]string{"-fabric", "verbs", "-verbs-device", VerbsDevice(t)}, args...)...)
}

// hasFlag reports whether args give one of the flags named.
func hasFlag(args []string, names ...string) bool {
	for _, a := range args {
		for _, n := range names {
			if a == "-"+n || a == "--"+n || strings.HasPrefix(a, "-"+n+"=") || strings.HasPrefix(a, "--"+n+"=") {
				return true
			}
		}
	}
	return false
}

// StateDirArgs are the arguments a proxy started with args needs for its
// state: a new directory unless args name one. A config file's state_dir
// yields to it; a proxy that joins memory nodes ignores it.
func StateDirArgs(t testing.TB, args []string) []string {
	if hasFlag(args, "state-dir") {
		return nil
	}
	return []string{"-state-dir", t.TempDir()}
}

// FrontendEnv names the environment variable that picks the RESP front end
// of every proxy the tests start ("gnet" or "redcon"; unset: the proxy's
// default), so that one suite covers both:
//
//	SHIFTLOCK_TEST_FRONTEND=redcon go test ./itest/... ./chaos/...
const FrontendEnv = "SHIFTLOCK_TEST_FRONTEND"

// ProxyArgs are the arguments every test proxy starts with: the front end
// named by FrontendEnv, if any. A test's own -frontend, given later, wins.
func ProxyArgs() []string {
	if fe := os.Getenv(FrontendEnv); fe != "" {
		return []string{"-frontend", fe}
	}
	return nil
}

// Proxy starts cmd/proxy on a free loopback port, with a state directory of
// its own if it runs the embedded memory node.
func Proxy(t testing.TB, args ...string) *Proc {
	t.Helper()
	base := append([]string{"-listen", "127.0.0.1:0", "-metrics", ""}, ProxyArgs()...)
	base = append(base, StateDirArgs(t, args)...)
	return Start(t, "proxy", Bin(t, "proxy"), append(base, args...), ProxyReady)
}

// FreePort returns a loopback port that was free a moment ago
// (freeport.Pick).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Redis starts a real redis-server with persistence off on a free port. It
// fails the test if redis-server is missing: `make test` installs it.
func Redis(t testing.TB, extra ...string) *Proc {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not found (make test installs it: scripts/install-deps.sh)")
	}
	port := FreePort(t)
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, extra...)
	ready := regexp.MustCompile(`Ready to accept connections`)
	p := Start(t, "redis-server", bin, args, ready)
	p.Addr = "127.0.0.1:" + strconv.Itoa(port)
	return p
}

// WaitTCP waits until addr accepts connections.
func WaitTCP(ctx context.Context, addr string) error {
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}
