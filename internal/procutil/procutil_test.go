package procutil

import (
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

func TestStopSignalsThenKills(t *testing.T) {
	polite := exec.Command("sleep", "30")
	if err := polite.Start(); err != nil {
		t.Skip("no sleep binary:", err)
	}
	start := time.Now()
	Stop(polite, syscall.SIGTERM, 10*time.Second)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("a child that obeys SIGTERM took %v to stop", took)
	}
	if ws := polite.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGTERM {
		t.Fatalf("child ended with %v, want SIGTERM", polite.ProcessState)
	}

	// It says when the trap is set: a signal before that would end it.
	stubborn := exec.Command("sh", "-c", `trap "" TERM; echo trapped; sleep 30`)
	if _, err := StartReady(stubborn, regexp.MustCompile(`(trapped)`), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	Stop(stubborn, syscall.SIGTERM, 300*time.Millisecond)
	if ws := stubborn.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGKILL {
		t.Fatalf("stubborn child ended with %v, want SIGKILL after the grace", stubborn.ProcessState)
	}
	Stop(nil, syscall.SIGTERM, time.Second) // no child: nothing to do
}

func TestCPUProfile(t *testing.T) {
	stop, err := StartCPUProfile("")
	if err != nil {
		t.Fatal(err)
	}
	stop()
	path := filepath.Join(t.TempDir(), "cpu.out")
	if stop, err = StartCPUProfile(path); err != nil {
		t.Fatal(err)
	}
	stop()
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("profile not written: %v", err)
	}
}

func TestServeMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "procutil_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	m, err := ServeMetrics("127.0.0.1:0", reg, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + m.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "procutil_test_total 3") {
		t.Fatalf("/metrics does not show the counter:\n%s", body)
	}
	m.Shutdown()
	if _, err := http.Get("http://" + m.Addr().String() + "/metrics"); err == nil {
		t.Fatal("still serving after Shutdown")
	}
	var none *MetricsServer
	none.Shutdown() // metrics disabled
	if _, err := ServeMetrics(m.Addr().String()+"x", reg, zap.NewNop(), nil); err == nil {
		t.Fatal("a bad address must fail the start")
	}
}

// TestProbes: /healthz answers while serving; /readyz follows ready.
func TestProbes(t *testing.T) {
	var notReady atomic.Value
	notReady.Store("")
	m, err := ServeMetrics("127.0.0.1:0", prometheus.NewRegistry(), zap.NewNop(), func() error {
		if why := notReady.Load().(string); why != "" {
			return errors.New(why)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + m.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	if code, body := get("/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz = %d %q", code, body)
	}
	notReady.Store("lease lost")
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "lease lost") {
		t.Fatalf("/readyz when not ready = %d %q", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz when not ready = %d; liveness does not follow readiness", code)
	}
}

func TestNewLogger(t *testing.T) {
	var b strings.Builder
	log, err := NewLogger("warn", &b)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", zap.Duration("took", time.Second))
	if s := b.String(); strings.Contains(s, "hidden") || !strings.Contains(s, `"took":"1s"`) {
		t.Fatalf("log output: %s", s)
	}
	if _, err := NewLogger("loud", &b); err == nil {
		t.Fatal("an unknown level must be an error")
	}
}

// TestBegin: -h and a configuration or log level that cannot be used end
// the start with 0, 2 and 2, saying why under the daemon's name; a profile
// that cannot be written ends it with 1; otherwise the daemon gets a
// logger, and end writes the profile.
func TestBegin(t *testing.T) {
	var b strings.Builder
	if log, _, code := Begin("d", flag.ErrHelp, "info", "", &b); log != nil || code != 0 || b.Len() != 0 {
		t.Fatalf("-h: %v %d %q", log, code, b.String())
	}
	if log, _, code := Begin("d", errors.New("bad entries"), "info", "", &b); log != nil || code != 2 || b.String() != "d: bad entries\n" {
		t.Fatalf("bad configuration: %v %d %q", log, code, b.String())
	}
	b.Reset()
	if log, _, code := Begin("d", nil, "loud", "", &b); log != nil || code != 2 || !strings.HasPrefix(b.String(), "d: log level") {
		t.Fatalf("bad log level: %v %d %q", log, code, b.String())
	}
	b.Reset()
	dir := t.TempDir()
	if log, _, code := Begin("d", nil, "info", filepath.Join(dir, "no", "such", "dir"), &b); log != nil || code != 1 || !strings.Contains(b.String(), "cpuprofile") {
		t.Fatalf("unwritable profile: %v %d %q", log, code, b.String())
	}
	b.Reset()
	path := filepath.Join(dir, "cpu.out")
	log, end, code := Begin("d", nil, "info", path, &b)
	if log == nil || code != 0 {
		t.Fatalf("a good start: %v %d %q", log, code, b.String())
	}
	log.Info("started")
	end()
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("profile not written: %v", err)
	}
	if !strings.Contains(b.String(), `"msg":"started"`) {
		t.Fatalf("log output: %q", b.String())
	}
}

// TestStartReady: the address comes from the first matching line, and a
// child that never prints one is killed once the timeout has passed.
func TestStartReady(t *testing.T) {
	srv := exec.Command("sh", "-c", `echo starting; echo "srv listening on 127.0.0.1:7"; echo "srv listening on 10.0.0.1:9"; sleep 30`)
	addr, err := StartReady(srv, regexp.MustCompile(`srv listening on (\S+)`), 30*time.Second)
	if err != nil || addr != "127.0.0.1:7" {
		t.Fatalf("StartReady = %q, %v; want 127.0.0.1:7", addr, err)
	}
	Stop(srv, syscall.SIGKILL, time.Second)

	mute := exec.Command("sleep", "30")
	start := time.Now()
	if _, err := StartReady(mute, regexp.MustCompile(`listening on (\S+)`), 200*time.Millisecond); err == nil {
		t.Fatal("a child that never printed its address was reported ready")
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("gave up after %v", took)
	}
	if mute.ProcessState == nil {
		t.Fatal("the silent child was left running")
	}
}
