// Command rangebench measures range locks the way a user takes them:
// LOCK.RANGE.ACQUIRE and LOCK.RANGE.RELEASE over RESP, through real proxy
// processes, on a memnode process (one proxy, and two with the clients
// split between them) and on a proxy's embedded memory node. Its
// workloads are CITRON's (FAST '23 §4.2), which make bench-range runs on
// the model fabric: spans of L = 1, 16 and 256 units and the three mixed,
// left borders Zipf 0.9 over [0, N − L] of one name, exclusive; and one
// client alone, whose every cycle binds the name to a tree and unbinds it.
//
// Targets are run alternately, -runs times; the report gives medians and
// same-run ratios against the embedded proxy, and CPU per cycle of the
// server processes (the proxies and the memnode, from /proc). With -doc it
// rewrites its section of docs/benchmarks/range.md.
//
//	rangebench -proxy-bin bin/proxy -memnode-bin bin/memnode -runs 3 -doc docs/benchmarks/range.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/docsection"
	"github.com/shiftlock/shiftlock-proxy/internal/keydist"
	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
	"github.com/shiftlock/shiftlock-proxy/internal/stats"
	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/lockmap"
)

func main() {
	proxyBin := flag.String("proxy-bin", "bin/proxy", "proxy binary")
	memnodeBin := flag.String("memnode-bin", "bin/memnode", "memnode binary")
	runs := flag.Int("runs", 3, "runs of every workload on each target")
	clients := flag.Int("clients", 32, "clients of the contended workloads")
	dur := flag.Duration("duration", 4*time.Second, "length of each measurement")
	doc := flag.String("doc", "", "rewrite the range-proxy section of this Markdown file")
	flag.Parse()

	dir, err := os.MkdirTemp("", "rangebench-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir) // after stopAll: deferred first
	defer stopAll()
	start := func(name, bin string, args ...string) *testproc.Proc {
		ready := testproc.ProxyReady
		if strings.HasPrefix(name, "memnode") {
			ready = testproc.MemnodeReady
		}
		sd, err := os.MkdirTemp(dir, name)
		if err != nil {
			fail(err)
		}
		p, err := testproc.Launch(name, bin, append([]string{"-listen", "127.0.0.1:0", "-metrics", "", "-state-dir", sd, "-log-level", "warn"}, args...), ready, 30*time.Second)
		if err != nil {
			fail(fmt.Errorf("starting %s: %w", name, err))
		}
		procs = append(procs, p)
		return p
	}
	mem := start("memnode", *memnodeBin)
	targets := []*target{
		{name: "embedded", note: "one proxy on its embedded memory node", procs: []*testproc.Proc{start("proxy-embedded", *proxyBin)}},
		{name: "memnode, 1 proxy", note: "a memnode process and one proxy (tcpfab on loopback)", procs: []*testproc.Proc{mem, start("proxy-m1", *proxyBin, "-memnode", mem.Addr)}},
	}
	two := []*testproc.Proc{mem, start("proxy-m2a", *proxyBin, "-memnode", mem.Addr), start("proxy-m2b", *proxyBin, "-memnode", mem.Addr)}
	targets = append(targets, &target{name: "memnode, 2 proxies", note: "the same memnode and two proxies, the clients split between them", procs: two})
	for _, t := range targets {
		for _, p := range t.procs {
			if !strings.HasPrefix(p.Name, "memnode") {
				t.addrs = append(t.addrs, p.Addr)
			}
		}
	}

	works := []workload{{name: "1 client, L=16, uniform", clients: 1, sizes: []uint64{16}, uniform: true}}
	for _, s := range [][]uint64{{1}, {16}, {256}, {1, 16, 256}} {
		works = append(works, workload{name: fmt.Sprintf("%d clients, L=%s, Zipf 0.9", *clients, joinSizes(s)), clients: *clients, sizes: s})
	}
	results := map[string]map[string][]result{} // workload -> target -> runs
	for _, w := range works {
		results[w.name] = map[string][]result{}
	}
	for r := 1; r <= *runs; r++ {
		for _, w := range works {
			for _, t := range targets {
				res, err := w.run(t, *dur, uint64(r))
				if err != nil {
					fail(fmt.Errorf("%s on %s: %w", w.name, t.name, err))
				}
				results[w.name][t.name] = append(results[w.name][t.name], res)
				fmt.Printf("run %d  %-28s %-20s %9.0f cycles/s  acquire p50 %-9v p99 %-9v cpu/cycle %v  nil %d\n",
					r, w.name, t.name, res.rate, res.p50.Round(time.Microsecond), res.p99.Round(time.Microsecond), res.cpu.Round(time.Microsecond), res.refused)
			}
		}
	}
	report := render(targets, works, results, *runs, *dur)
	fmt.Println(report)
	if *doc != "" {
		if err := docsection.Replace(*doc, "Benchmarks", "range-proxy", report); err != nil {
			fail(err)
		}
	}
}

type target struct {
	name, note string
	procs      []*testproc.Proc // every server process, for CPU
	addrs      []string         // the proxies clients talk to
}

type workload struct {
	name    string
	clients int
	sizes   []uint64 // client i locks spans of sizes[i % len]
	uniform bool     // left borders uniform, not Zipf 0.9
}

type result struct {
	rate     float64       // cycles (acquire + release) per second
	p50, p99 time.Duration // acquire latency
	cpu      time.Duration // server CPU per cycle
	refused  int64         // acquires that answered nil after their WAIT
}

// run measures w on t for d.
func (w workload) run(t *target, d time.Duration, seed uint64) (result, error) {
	var rcs []*redis.Client
	for _, a := range t.addrs {
		rc := redis.NewClient(&redis.Options{Addr: a, PoolSize: w.clients + 2, ReadTimeout: 30 * time.Second})
		defer rc.Close()
		rcs = append(rcs, rc)
	}
	units := lockmap.RangeUnits()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cycles, refused atomic.Int64
	var failed atomic.Pointer[error]
	var measuring atomic.Bool
	lats := make([][]time.Duration, w.clients)
	var wg sync.WaitGroup
	for i := 0; i < w.clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc := rcs[i%len(rcs)]
			l := w.sizes[i%len(w.sizes)]
			var dist keydist.Dist = keydist.NewZipf(units-l+1, 0.9)
			if w.uniform {
				dist = keydist.Uniform{N: units - l + 1}
			}
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			for n := 0; ctx.Err() == nil; n++ {
				x := dist.Next(r)
				tok := fmt.Sprintf("c%d-%d", i, n)
				asked := time.Now()
				_, err := rc.Do(context.Background(), "LOCK.RANGE.ACQUIRE", "bench", x, x+l, tok, "PX", 10000, "WAIT", 5000).Uint64()
				took := time.Since(asked)
				if errors.Is(err, redis.Nil) {
					refused.Add(1)
					continue
				}
				if err == nil {
					err = rc.Do(context.Background(), "LOCK.RANGE.RELEASE", "bench", x, x+l, tok).Err()
				}
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				if measuring.Load() {
					cycles.Add(1)
					lats[i] = append(lats[i], took)
				}
			}
		}()
	}
	time.Sleep(d / 4) // warm up: the name bound, connections open
	cpu0, err := serverCPU(t)
	if err != nil {
		return result{}, err
	}
	measuring.Store(true)
	t0 := time.Now()
	time.Sleep(d)
	measuring.Store(false)
	elapsed := time.Since(t0)
	cpu1, err := serverCPU(t)
	if err != nil {
		return result{}, err
	}
	n := cycles.Load()
	cancel()
	wg.Wait()
	if e := failed.Load(); e != nil {
		return result{}, *e
	}
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	res := result{rate: float64(n) / elapsed.Seconds(), refused: refused.Load()}
	if len(all) > 0 {
		res.p50, res.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	if n > 0 {
		res.cpu = (cpu1 - cpu0) / time.Duration(n)
	}
	return res, nil
}

// serverCPU is the CPU time of every server process of t so far.
func serverCPU(t *target) (time.Duration, error) {
	var sum time.Duration
	for _, p := range t.procs {
		c, err := procutil.ProcCPU(p.Cmd.Process.Pid)
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

func joinSizes(s []uint64) string {
	var parts []string
	for _, v := range s {
		parts = append(parts, fmt.Sprint(v))
	}
	return strings.Join(parts, ",")
}

func render(targets []*target, works []workload, results map[string]map[string][]result, runs int, d time.Duration) string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	w("<!-- generated by bench/cmd/rangebench (make bench-range); edit it, not this section -->\n\n")
	w("## Range locks through the proxy (issue 35)\n\n")
	w("The range-lock path a user takes: `LOCK.RANGE.ACQUIRE key start end token PX 10000 WAIT 5000`, then\n")
	w("`LOCK.RANGE.RELEASE`, over RESP (go-redis), through real proxy processes, on one name (so one\n")
	w("tree, bound while the clients use it). Workloads as CITRON's above on the model (left borders Zipf\n")
	w("0.9 over [0, N − L], exclusive, N = 4,194,304), plus one client alone on uniform borders, whose\n")
	w("every cycle binds the name to a tree and gives it back (two control calls to the memory node per\n")
	w("cycle). Targets:\n\n")
	for _, t := range targets {
		w("- **%s**: %s\n", t.name, t.note)
	}
	w("\nThe model's rows are on a fake clock with the paper's 2 µs verbs; these are wall-clock, on\n")
	w("loopback TCP, with the clients on the same two cores, so only their ratios to each other are\n")
	w("comparable, not their rates to the model's. CPU is the user + system time of the server processes\n")
	w("(proxies and memnode) per cycle.\n\n")
	w("Command: `make bench-range` (`rangebench -runs %d -duration %v`). Machine: %s. Date: %s. Every cell is the median of %d runs, targets alternating; × is the median of same-run ratios to the embedded proxy.\n\n",
		runs, d, machine(), time.Now().UTC().Format("2006-01-02"), runs)
	// The spread of the memnode targets' ratios over the contended
	// workloads, for the reading below the table.
	lo, hi := 0.0, 0.0
	for _, wk := range works[1:] {
		base := results[wk.name][targets[0].name]
		for _, t := range targets[1:] {
			rs := results[wk.name][t.name]
			var ratios []float64
			for i := range rs {
				if i < len(base) && base[i].rate > 0 {
					ratios = append(ratios, rs[i].rate/base[i].rate)
				}
			}
			if len(ratios) == 0 {
				continue
			}
			x := stats.Median(ratios)
			if lo == 0 || x < lo {
				lo = x
			}
			hi = max(hi, x)
		}
	}
	w("| workload | target | cycles/s | × embedded | acquire p50 | acquire p99 | server CPU/cycle | nil after WAIT |\n|---|---|---|---|---|---|---|---|\n")
	for _, wk := range works {
		base := results[wk.name][targets[0].name]
		for _, t := range targets {
			rs := results[wk.name][t.name]
			var ratios []float64
			for i := range rs {
				if i < len(base) && base[i].rate > 0 {
					ratios = append(ratios, rs[i].rate/base[i].rate)
				}
			}
			w("| %s | %s | %s | %.2f | %v | %v | %v | %d |\n", wk.name, t.name, rate(stats.Median(pick(rs, func(r result) float64 { return r.rate }))),
				stats.Median(ratios), stats.Median(pick(rs, func(r result) time.Duration { return r.p50 })).Round(time.Microsecond),
				stats.Median(pick(rs, func(r result) time.Duration { return r.p99 })).Round(time.Microsecond),
				stats.Median(pick(rs, func(r result) time.Duration { return r.cpu })).Round(time.Microsecond),
				stats.Median(pick(rs, func(r result) int64 { return r.refused })))
		}
	}
	w("\n**Reading.** On a memnode process the contended workloads run at %.2f–%.2f× the embedded\n", lo, hi)
	w("proxy's rate: every verb of CITRON's protocol is a TCP round trip to the memory node instead of\n")
	w("a memory access, and a waiting span polls by round trips (backing off to 200 µs). Two proxies\n")
	w("share one memnode, one tree and the two cores with the clients: they add no rate here, and\n")
	w("their verbs cost more CPU per cycle, meeting in one tree from two processes. One client alone\n")
	w("pays two control calls per cycle on top (the name is bound on its first acquire and given back\n")
	w("on its last release). Beside CITRON on the model (above: up to millions of grants per second),\n")
	w("the proxy's rates are wall-clock, with a verb costing tens to hundreds of µs of loopback TCP and\n")
	w("Go scheduling on two shared cores instead of 2 µs of fake time, and every client's RESP round\n")
	w("trip on the same cores.\n")
	return b.String()
}

func pick[T any](rs []result, f func(result) T) []T {
	out := make([]T, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

func rate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func machine() string {
	model := "unknown CPU"
	if out, err := exec.Command("sh", "-c", "lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1").Output(); err == nil && len(out) > 0 {
		model = strings.TrimSpace(string(out))
	}
	n, _ := exec.Command("nproc").Output()
	return fmt.Sprintf("%s, %s CPUs", model, strings.TrimSpace(string(n)))
}

// procs are the processes started, stopped on the way out.
var procs []*testproc.Proc

func stopAll() {
	for _, p := range procs {
		p.Kill()
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "rangebench:", err)
	stopAll()
	os.Exit(1)
}
