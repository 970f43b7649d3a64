// Command fabricbench measures the verbs fabrics: memfab (in-process) and
// tcpfab (TCP soft-NIC) against a real memnode process, next to a bare TCP
// echo over loopback as the physical floor.
//
//	fabricbench -memnode bin/memnode -runs 3
//
// For every verb it reports the median and p99 latency with one verb
// outstanding and the rate with 1, 16 and 64 outstanding (goroutines on one
// endpoint), then checks the targets. With -runs N every number is the
// median of N independent runs (fresh processes each time).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
)

type options struct {
	memnode  string
	duration time.Duration
	samples  int
	runs     int
	fabric   string // only this fabric, if set
	verb     string // only this verb, if set
}

func main() {
	var o options
	echo := flag.String("serve-echo", "", "internal: serve the echo floor on this address")
	flag.StringVar(&o.memnode, "memnode", "", "memnode binary to serve tcpfab (default: an in-process tcpfab server on loopback)")
	flag.DurationVar(&o.duration, "duration", time.Second, "measuring time per throughput cell")
	flag.IntVar(&o.samples, "samples", 20000, "latency samples per verb")
	flag.IntVar(&o.runs, "runs", 1, "independent runs; the report shows each cell's median")
	flag.StringVar(&o.fabric, "fabric", "", "measure only this fabric (memfab or tcpfab)")
	flag.StringVar(&o.verb, "verb", "", `measure only this verb (e.g. "MaskedCAS 16")`)
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of this process here")
	flag.Parse()
	stopProfile, err := procutil.StartCPUProfile(*cpuprofile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpuprofile:", err)
		os.Exit(1)
	}
	defer stopProfile()
	if *echo != "" {
		if err := serveEcho(*echo); err != nil {
			fmt.Fprintln(os.Stderr, "echo:", err)
			os.Exit(1)
		}
		return
	}
	var results []result
	for r := 0; r < o.runs; r++ {
		fmt.Fprintf(os.Stderr, "run %d/%d\n", r+1, o.runs)
		res, err := runOnce(o)
		if err != nil {
			stopProfile()
			fmt.Fprintln(os.Stderr, "fabricbench:", err)
			os.Exit(1)
		}
		results = append(results, res)
	}
	report(os.Stdout, o, median(results))
}

var outstanding = [...]int{1, 16, 64}

type row struct {
	fabric, verb string
	med, p99     time.Duration
	rate         [len(outstanding)]float64
	// CPU per verb at 64 outstanding: this process, and the memnode
	// process (tcpfab against a separate memnode only).
	cpu, serverCPU time.Duration
}

type result struct {
	rows             []row
	echoMed, echoP99 time.Duration
	memfabCore       float64 // MaskedCAS 16 on one core
}

func runOnce(o options) (result, error) {
	var res result
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	echoProc, echoAddr, err := startProc("echo listening on ", self, "-serve-echo", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	defer stopProc(echoProc)

	fabrics := []struct {
		name string
		open func() (pair, func(), error)
	}{
		{"memfab", memfabPair},
		{"tcpfab", func() (pair, func(), error) { return tcpfabPair(o.memnode) }},
	}
	for _, f := range fabrics {
		if o.fabric != "" && o.fabric != f.name {
			continue
		}
		if f.name == "tcpfab" {
			// The floor, measured next to what it is compared with.
			if res.echoMed, res.echoP99, err = echoLatency(echoAddr, o.samples); err != nil {
				return res, fmt.Errorf("echo: %w", err)
			}
		}
		// One fabric at a time: the other's idle endpoints must not be
		// starved of their heartbeats by this one's busy workers.
		p, closeFab, err := f.open()
		if err != nil {
			return res, err
		}
		err = measure(o, p, &res)
		if err == nil && p.name == "memfab" {
			res.memfabCore, err = singleCore(p, verbs[5], o.duration)
		}
		closeFab()
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

func measure(o options, p pair, res *result) error {
	for _, v := range verbs {
		if o.verb != "" && o.verb != v.name {
			continue
		}
		r := row{fabric: p.name, verb: v.name}
		var err error
		if r.med, r.p99, err = latency(p, v, o.samples); err != nil {
			return fmt.Errorf("%s %s: %w", p.name, v.name, err)
		}
		for i, n := range outstanding {
			if r.rate[i], r.cpu, r.serverCPU, err = throughput(p, v, n, o.duration); err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
		}
		fmt.Fprintf(os.Stderr, "  %-7s %-13s median %8v p99 %8v  %10.0f %10.0f %10.0f /s  cpu/verb@64 %v + %v\n",
			r.fabric, r.verb, r.med, r.p99, r.rate[0], r.rate[1], r.rate[2], r.cpu, r.serverCPU)
		res.rows = append(res.rows, r)
	}
	return nil
}

// Liveness is slow in the benchmark: the point is the verbs, and a busy
// machine must not get a node fenced halfway through a run.
const (
	benchHeartbeat = time.Second
	benchDeadAfter = time.Minute
)

// keepAlive heartbeats for ep, as a real node does.
func keepAlive(ep rdma.Endpoint) func() {
	hb := rdma.StartHeartbeat(ep, func() time.Duration { return 0 }, nil)
	return hb.Stop
}

func memfabPair() (pair, func(), error) {
	host := memnode.New(memnode.Config{Entries: 1 << 16, HeartbeatInterval: benchHeartbeat, DeadAfter: benchDeadAfter})
	f := memfab.New(host)
	a, err := f.Join("bench-a")
	if err != nil {
		return pair{}, nil, err
	}
	b, err := f.Join("bench-b")
	if err != nil {
		return pair{}, nil, err
	}
	b.Bind(func(rdma.Message) error { return nil })
	sa, sb := keepAlive(a), keepAlive(b)
	return pair{name: "memfab", a: a, b: b, tgt: 1}, func() {
		sa()
		sb()
		a.Close()
		b.Close()
		host.Close()
	}, nil
}

// tcpfabPair joins two endpoints to a memnode process, or to an in-process
// tcpfab server when no binary is given.
func tcpfabPair(bin string) (pair, func(), error) {
	var addr string
	var stop func()
	pid := 0
	if bin != "" {
		// A memnode will not start without somewhere to keep its state
		// across restarts; a benchmark's run needs none beyond itself.
		state, err := os.MkdirTemp("", "fabricbench-memnode-")
		if err != nil {
			return pair{}, nil, err
		}
		cmd, a, err := startProc("memnode listening on ", bin,
			"-listen", "127.0.0.1:0", "-metrics", "", "-entries", "65536", "-log-level", "warn",
			"-state-dir", state,
			"-heartbeat", benchHeartbeat.String(), "-dead-after", benchDeadAfter.String())
		if err != nil {
			_ = os.RemoveAll(state)
			return pair{}, nil, err
		}
		addr, stop, pid = a, func() { stopProc(cmd); _ = os.RemoveAll(state) }, cmd.Process.Pid
	} else {
		host := memnode.New(memnode.Config{Entries: 1 << 16, HeartbeatInterval: benchHeartbeat, DeadAfter: benchDeadAfter})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return pair{}, nil, err
		}
		srv := tcpfab.NewServer(host, nil)
		go func() { _ = srv.Serve(ln) }()
		addr, stop = ln.Addr().String(), func() { _ = srv.Close(); host.Close() }
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := tcpfab.Dial(ctx, addr, tcpfab.Config{Name: "bench-a"})
	if err != nil {
		stop()
		return pair{}, nil, err
	}
	b, err := tcpfab.Dial(ctx, addr, tcpfab.Config{Name: "bench-b"})
	if err != nil {
		a.Close()
		stop()
		return pair{}, nil, err
	}
	b.Bind(func(rdma.Message) error { return nil })
	sa, sb := keepAlive(a), keepAlive(b)
	return pair{name: "tcpfab", a: a, b: b, tgt: 1, serverPID: pid}, func() {
		sa()
		sb()
		a.Close()
		b.Close()
		stop()
	}, nil
}
