// Package procutil is the process plumbing the project's commands share:
// their start (Main, Begin), the JSON logger, the /metrics endpoint, a CPU profile switch, CPU-time
// readers for benchmarks, and the start and graceful stop of a child
// process.
package procutil

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/net/netutil"
)

// Main runs a command's run with the arguments after the program name and
// the process's standard output and error, under a context that a stop
// signal (StopSignals) cancels, and exits with the code run returns. Tests
// call run itself, with a context and writers of their own.
func Main(run func(ctx context.Context, args []string, stdout, stderr io.Writer) int) {
	ctx, stop := signal.NotifyContext(context.Background(), StopSignals...)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// StopSignals stop a daemon cleanly: SIGTERM, SIGINT (Ctrl-C), and SIGHUP,
// what a daemon run from a terminal gets when the terminal closes. Go's
// default for SIGHUP is to exit at once, as from kill -9: a proxy then
// skipped its drain, and its next start on the embedded memory node's
// state waited out the room its beats keep for grants to come.
var StopSignals = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP}

// Begin starts a daemon named name once its configuration is parsed, with
// parseErr the parse's error: a logger at level writing to stderr
// (NewLogger), and a CPU profile to cpuProfile (StartCPUProfile; none if
// empty). The daemon goes on when log is not nil, and defers end, which
// stops the profile and flushes the log. Otherwise it exits with code: 0
// after -h (flag.ErrHelp), 2 for a configuration or log level it cannot
// use (said on stderr), 1 for a profile it cannot write (logged).
func Begin(name string, parseErr error, level, cpuProfile string, stderr io.Writer) (log *zap.Logger, end func(), code int) {
	if errors.Is(parseErr, flag.ErrHelp) {
		return nil, nil, 0
	}
	if parseErr != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, parseErr)
		return nil, nil, 2
	}
	log, err := NewLogger(level, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return nil, nil, 2
	}
	stopProfile, err := StartCPUProfile(cpuProfile)
	if err != nil {
		log.Error("cpuprofile", zap.Error(err))
		_ = log.Sync()
		return nil, nil, 1
	}
	return log, func() { stopProfile(); _ = log.Sync() }, 0
}

// NewLogger is the daemons' logger: JSON lines to out at level ("debug",
// "info", "warn" or "error"), with ISO 8601 times and readable durations.
func NewLogger(level string, out io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	enc.EncodeDuration = zapcore.StringDurationEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(out)), lvl)
	return zap.New(core), nil
}

// MetricsMaxConns bounds the connections the metrics endpoint serves at
// once, and so the file descriptors it can take.
const MetricsMaxConns = 16

// MetricsServer serves /metrics until Shutdown.
type MetricsServer struct {
	srv  *http.Server
	addr net.Addr
}

// ServeMetrics listens on addr and serves g's metrics at /metrics in the
// background; serving errors after the start are logged. The listen error
// is returned, so that a taken port fails the start rather than leaving
// the daemon unobservable.
//
// The same address answers the probes orchestrators use: /healthz is 200
// while the process serves at all (liveness), and /readyz is 200 when ready
// returns nil and 503 with its error otherwise (readiness: whether to send
// traffic here). A nil ready is always ready.
func ServeMetrics(addr string, g prometheus.Gatherer, log *zap.Logger, ready func() error) (*MetricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	// At most MetricsMaxConns scrapes at once, the rest wait in the
	// kernel's queue: a flood of connections here must not use up the
	// descriptors the daemon's clients and peers need.
	ln = netutil.LimitListener(ln, MetricsMaxConns)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil {
			if err := ready(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, "not ready: "+err.Error()+"\n")
				return
			}
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	// Idle keep-alive connections would hold those places forever.
	m := &MetricsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second}, addr: ln.Addr()}
	go func() {
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", zap.Error(err))
		}
	}()
	return m, nil
}

// Addr is the address the server listens on (with the port it picked).
func (m *MetricsServer) Addr() net.Addr { return m.addr }

// Shutdown stops the server, waiting up to 5 s for scrapes in flight. A nil
// server (metrics disabled) is a no-op.
func (m *MetricsServer) Shutdown() {
	if m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.srv.Shutdown(ctx)
}

// StartCPUProfile writes a CPU profile of this process to path until the
// returned stop is called. An empty path profiles nothing and returns a stop
// that does nothing, so callers can defer it unconditionally.
func StartCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// Stop sends sig to a started child, so that it can shut down cleanly (and,
// say, flush its CPU profile), and kills it if it has not exited after
// grace. It returns once the child is gone.
func Stop(cmd *exec.Cmd, sig os.Signal, grace time.Duration) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// StartReady starts cmd and waits up to timeout for a line of its stdout
// that ready matches, and returns the match's last group: by convention the
// address a server prints once it listens ("memnode listening on ADDR").
// The rest of stdout is drained, so the child never blocks on a full pipe.
// If no such line comes, the child is killed.
func StartReady(cmd *exec.Cmd, ready *regexp.Regexp, timeout time.Duration) (string, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	found := make(chan string, 1)
	// A process that refuses its configuration exits at once; its stdout
	// closing says so, and the caller hears it now, not after the timeout.
	closed := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[len(m)-1]
				_, _ = io.Copy(io.Discard, out)
				return
			}
		}
		_, _ = io.Copy(io.Discard, out)
		close(closed)
	}()
	select {
	case s := <-found:
		return s, nil
	case <-closed:
		err := cmd.Wait()
		return "", fmt.Errorf("%s exited (%v) before printing a line matching %q", cmd.Path, err, ready)
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return "", fmt.Errorf("%s did not print a line matching %q within %v", cmd.Path, ready, timeout)
	}
}

// ReadSecret reads a shared secret (the fabric's, fabric_secret_file) from
// path: its contents, without surrounding whitespace, at least 16 bytes.
// An empty path is no secret.
func ReadSecret(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fabric_secret_file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < 16 {
		return nil, fmt.Errorf("fabric_secret_file %s: %d bytes; use at least 16 random ones (e.g. openssl rand -hex 32)", path, len(b))
	}
	return b, nil
}
