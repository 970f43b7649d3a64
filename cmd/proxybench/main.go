// Command proxybench compares shiftlock-proxy (embedded memory node) with a
// real redis-server on the same machine, in the same run, on the workloads of
// the proxy's acceptance list:
//
//  1. uncontended SET NX PX plus the compare-and-delete release, one client:
//     round-trip latency of the pair (p50, p99);
//  2. many clients on distinct keys: acquire-release cycles per second;
//  3. many clients on one hot key, each a redsync mutex with its defaults,
//     holding the lock briefly: acquisitions per second, time to acquire
//     (p50, p99, max), failures, and fairness (acquisitions per client).
//
// Workload 2 also runs on a null server (nullserver.go): the proxy's RESP
// front end answering without locking, the ceiling of the proxy's ratio.
//
// Targets are run alternately, several times, and the report gives medians
// and same-run ratios. With -doc it rewrites its section of
// docs/benchmarks.md.
//
//	proxybench -proxy-bin bin/proxy -runs 3 -doc docs/benchmarks.md
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/docsection"
	"github.com/shiftlock/shiftlock-proxy/internal/freeport"
	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
)

func main() {
	proxyBin := flag.String("proxy-bin", "bin/proxy", "proxy binary to start")
	redisBin := flag.String("redis-bin", "redis-server", "redis-server binary to start")
	runs := flag.Int("runs", 3, "runs of every workload on each target")
	cycles := flag.Int("latency-cycles", 5000, "acquire-release pairs for the latency workload")
	clients := flag.Int("clients", 50, "clients for the throughput and hot-key workloads")
	tput := flag.Duration("throughput-time", 5*time.Second, "duration of the distinct-keys workload")
	hot := flag.Duration("hot-time", 15*time.Second, "duration of the hot-key workload")
	hold := flag.Duration("hold", time.Millisecond, "time a hot-key client holds the lock")
	doc := flag.String("doc", "", "rewrite the proxy section of this Markdown file")
	proxyArgs := flag.String("proxy-args", "", "extra proxy flags, space-separated (e.g. -cpuprofile /tmp/p.out)")
	hotOnly := flag.Bool("hot-only", false, "run only the hot-key workload and print its runs (no report)")
	nullAddr := flag.String("serve-null", "", "serve as the null server on this address (used by proxybench itself)")
	flag.Parse()
	if *nullAddr != "" {
		fail(serveNull(*nullAddr))
	}

	ctx := context.Background()
	redis, err := startRedis(*redisBin)
	if err != nil {
		fail(err)
	}
	defer redis.stop()
	proxy, err := startProxy(*proxyBin, strings.Fields(*proxyArgs))
	if err != nil {
		fail(err)
	}
	defer proxy.stop()
	var null *proc
	if !*hotOnly {
		if null, err = startNull(); err != nil {
			fail(err)
		}
		defer null.stop()
	}
	targets := []target{{"redis", redis}, {"proxy", proxy}}

	var lat [2][]latencyResult
	var thr [2][]tputResult
	var nullThr []tputResult
	var hk [2][]hotResult
	for r := 0; r < *runs; r++ {
		for i, t := range targets {
			if *hotOnly {
				h, err := hotKey(ctx, t.addr, *clients, *hot, *hold)
				if err != nil {
					fail(err)
				}
				fmt.Printf("run %d %s: %.0f acq/s, p50 %v p99 %v max %v, per client %d..%d, failures %d, unlock-to-next-lock p50 %v\n",
					r+1, t.name, h.rate, h.p50, h.p99, h.max, h.perClient[0], h.perClient[len(h.perClient)-1], h.failures, h.gap)
				continue
			}
			fmt.Fprintf(os.Stderr, "run %d/%d %s: latency...", r+1, *runs, t.name)
			l, err := latency(ctx, t.addr, *cycles)
			if err != nil {
				fail(err)
			}
			lat[i] = append(lat[i], l)
			fmt.Fprintf(os.Stderr, " p50 %v; throughput...", l.p50)
			th, err := throughput(ctx, t.proc, *clients, *tput)
			if err != nil {
				fail(err)
			}
			thr[i] = append(thr[i], th)
			fmt.Fprintf(os.Stderr, " %.0f/s; hot key...", th.rate)
			h, err := hotKey(ctx, t.addr, *clients, *hot, *hold)
			if err != nil {
				fail(err)
			}
			hk[i] = append(hk[i], h)
			fmt.Fprintf(os.Stderr, " %.0f acq/s, max %v\n", h.rate, h.max)
		}
		if *hotOnly {
			continue
		}
		fmt.Fprintf(os.Stderr, "run %d/%d null server: throughput...", r+1, *runs)
		th, err := throughput(ctx, null, *clients, *tput)
		if err != nil {
			fail(err)
		}
		nullThr = append(nullThr, th)
		fmt.Fprintf(os.Stderr, " %.0f/s\n", th.rate)
	}
	if *hotOnly {
		return
	}
	report := render(targets, lat, thr, nullThr, hk, *runs, *clients, *hold, redisVersion(*redisBin))
	fmt.Println(report)
	if *doc != "" {
		if err := docsection.Replace(*doc, "Benchmarks", "proxy", report); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "proxybench:", err)
	os.Exit(1)
}

type target struct {
	name string
	*proc
}

type proc struct {
	cmd  *exec.Cmd
	addr string
}

// stop asks for a graceful shutdown (the proxy flushes a CPU profile then)
// and kills after a grace period.
func (p *proc) stop() { procutil.Stop(p.cmd, syscall.SIGTERM, 5*time.Second) }

func start(bin string, args []string, ready *regexp.Regexp, fixedAddr string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	a, err := procutil.StartReady(cmd, ready, 20*time.Second)
	if err != nil {
		return nil, err
	}
	if fixedAddr != "" {
		a = fixedAddr
	}
	return &proc{cmd: cmd, addr: a}, nil
}

func startProxy(bin string, extra []string) (*proc, error) {
	return start(bin, append([]string{"-listen", "127.0.0.1:0", "-metrics", "", "-log-level", "warn"}, extra...),
		regexp.MustCompile(`proxy listening on (\S+)`), "")
}

func startRedis(bin string) (*proc, error) {
	port, err := freeport.Pick()
	if err != nil {
		return nil, err
	}
	return start(bin, []string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"},
		regexp.MustCompile(`(Ready to accept connections)`), fmt.Sprintf("127.0.0.1:%d", port))
}

func redisVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "unknown"
	}
	if m := regexp.MustCompile(`v=(\S+)`).FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return strings.TrimSpace(string(out))
}
