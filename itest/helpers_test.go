package itest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/resp/wire"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func client(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	t.Cleanup(func() { c.Close() })
	return c
}

// cluster is one memnode process with n proxy processes joined to it.
func cluster(t *testing.T, n int, proxyArgs ...string) (*testproc.Proc, []*testproc.Proc) {
	mn := testproc.Memnode(t, "-entries", "65536")
	var ps []*testproc.Proc
	for i := 0; i < n; i++ {
		ps = append(ps, testproc.Proxy(t, append([]string{"-memnode", mn.Addr}, proxyArgs...)...))
	}
	return mn, ps
}

// eachFrontend runs f as a subtest on each RESP front end, named after it,
// whatever SHIFTLOCK_TEST_FRONTEND picks for the other tests; f gives the
// proxies it starts -frontend fe.
func eachFrontend(t *testing.T, f func(t *testing.T, fe string)) {
	for _, fe := range []string{"gnet", "redcon"} {
		t.Run(fe, func(t *testing.T) { f(t, fe) })
	}
}

// startServer starts a redis-server or a proxy, as server names it
// ("redis-server" or "proxy"), and returns its address.
func startServer(t *testing.T, server string) string {
	t.Helper()
	if server == "proxy" {
		return testproc.Proxy(t).Addr
	}
	return testproc.Redis(t).Addr
}

// tempFile writes content to a file called name in a directory of the
// test's own, and returns its path.
func tempFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// repoFile is the content of the file at path rel in the shiftlock-proxy
// module.
func repoFile(t *testing.T, rel string) []byte {
	t.Helper()
	root, err := testproc.Root()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// respCmd encodes a command as a client sends it.
func respCmd(args ...string) string { return string(wire.AppendCommand(nil, args...)) }

// lockCycle takes key with SET NX PX and releases it with the
// compare-and-delete script through c, and says what went wrong if either
// did not do what it should.
func lockCycle(ctx context.Context, c *redis.Client, key, token string, ttl time.Duration) error {
	if ok, err := c.SetNX(ctx, key, token, ttl).Result(); err != nil || !ok {
		return fmt.Errorf("SET %s NX: %v %v", key, ok, err)
	}
	if n, err := redis.NewScript(casDelete).Run(ctx, c, []string{key}, token).Int(); err != nil || n != 1 {
		return fmt.Errorf("release of %s: %d %v", key, n, err)
	}
	return nil
}

// setNXLater sends SET key value NX PX ttl through c in the background,
// where it can wait in the lock's queue, and returns what it comes to: nil
// once granted, redis.Nil if refused, or the error.
func setNXLater(ctx context.Context, c *redis.Client, key, value string, ttl time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		ok, err := c.SetNX(ctx, key, value, ttl).Result()
		if err == nil && !ok {
			err = redis.Nil
		}
		done <- err
	}()
	return done
}

// isTryAgain reports whether err is the -TRYAGAIN a client retries.
func isTryAgain(err error) bool { return strings.HasPrefix(err.Error(), "TRYAGAIN") }

// anyError retries every error (see untilGranted): what a restarting
// process's clients meet, refused connections among them.
func anyError(error) bool { return true }

// untilGranted calls ask until it grants (a fence that is not 0), retrying
// the errors retry accepts, and fails the test on any other or once
// deadline has passed. It returns the fence and when the grant came.
func untilGranted(t *testing.T, deadline time.Time, retry func(error) bool, ask func() (uint64, error)) (uint64, time.Time) {
	t.Helper()
	var last error
	for time.Now().Before(deadline) {
		f, err := ask()
		if err == nil && f != 0 {
			return f, time.Now()
		}
		if err != nil {
			if !retry(err) {
				t.Fatal(err)
			}
			last = err
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("not granted by the deadline (last error: %v)", last)
	return 0, time.Time{}
}

// inParallel runs f(0) to f(n-1) at once and returns when all have, with
// their errors joined.
func inParallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// awaitInfo waits until the proxy's INFO mentions want.
func awaitInfo(t *testing.T, c *redis.Client, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := c.Info(ctxT(t, 10*time.Second), "locks", "clients").Result()
		if err != nil {
			t.Fatalf("INFO: %v", err)
		}
		if strings.Contains(info, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("INFO never showed %q:\n%s", want, info)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitOutput waits up to d until p has printed want, and fails the test
// if it has not.
func awaitOutput(t *testing.T, p *testproc.Proc, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(p.Output(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not print %q within %v:\n%s", p.Name, want, d, p.Output())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var metricsLine = regexp.MustCompile(`metrics on (\S+)`)

// metricsAddr is where a proxy or memory node started with -metrics
// serves /metrics, from the line it prints.
func metricsAddr(t *testing.T, p *testproc.Proc) string {
	t.Helper()
	m := metricsLine.FindStringSubmatch(p.Output())
	if m == nil {
		t.Fatalf("the %s did not print its metrics address:\n%s", p.Name, p.Output())
	}
	return m[1]
}

// scrapeMetrics is the lines of the /metrics page served at addr.
func scrapeMetrics(t *testing.T, addr string) []string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("/metrics at %s: %v", addr, err)
	}
	return strings.Split(string(body), "\n")
}

// metricValue is the value of the unlabelled series name in the /metrics
// served at addr.
func metricValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	for _, l := range scrapeMetrics(t, addr) {
		if f := strings.Fields(l); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatalf("%s at %s: %q", name, addr, l)
			}
			return v
		}
	}
	t.Fatalf("%s does not export %s", addr, name)
	return 0
}
