// Command chaos runs a fault campaign against real processes on loopback —
// one memnode (or, with -ha, a 3-member etcd and two memory nodes that fail
// over: kill -9 or partition of the active one, kill -9 of an etcd member),
// several proxies, many clients on a skewed key set in shared
// and exclusive mode — injecting kill -9 of proxies holding locks, memnode
// restarts, link faults through toxiproxy (latency, timeouts, resets,
// partitions, on proxy-memnode and proxy-proxy links) and paused proxies.
// It then checks the clients' history (chaos.Check) and reports operations,
// faults by kind, violations, stuck requests and recovery times.
//
//	chaos -duration 10m -doc docs/reliability.md
//
// It exits 1 if it found a violation, a lapsed lock answered as held, or a
// stuck request.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/shiftlock/shiftlock-proxy/bench/chaos"
	"github.com/shiftlock/shiftlock-proxy/internal/docsection"
	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

func main() {
	var cfg chaos.Config
	flag.StringVar(&cfg.MemnodeBin, "memnode-bin", "bin/memnode", "memnode binary")
	flag.StringVar(&cfg.ProxyBin, "proxy-bin", "bin/proxy", "proxy binary")
	flag.StringVar(&cfg.WorkDir, "workdir", "", "state directory (default: a temporary one)")
	flag.IntVar(&cfg.Proxies, "proxies", 3, "proxy processes")
	flag.IntVar(&cfg.Clients, "clients", 48, "client goroutines, spread over the proxies")
	flag.IntVar(&cfg.Keys, "keys", 16, "lock keys")
	flag.Float64Var(&cfg.Zipf, "zipf", 0.9, "key skew (Zipf θ)")
	flag.Float64Var(&cfg.Shared, "shared", 0.3, "fraction of shared acquires")
	flag.DurationVar(&cfg.TTL, "ttl", 1500*time.Millisecond, "TTL of every lock")
	flag.DurationVar(&cfg.Wait, "wait", time.Second, "WAIT of every acquire")
	flag.DurationVar(&cfg.DeadAfter, "dead-after", time.Second, "memnode dead_after")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "campaign length")
	flag.DurationVar(&cfg.FaultEvery, "fault-every", 8*time.Second, "time between faults")
	kinds := flag.String("faults", "", "fault kinds, in rotation (default: every kind of the topology)")
	flag.BoolVar(&cfg.HA, "ha", false, "failover topology: a 3-member etcd and 2 memory nodes campaigning for the shard")
	flag.StringVar(&cfg.EtcdBin, "etcd-bin", "", "etcd binary, with -ha (default: etcd on PATH)")
	flag.IntVar(&cfg.ConstKeys, "const-keys", 2, "keys locked with the constant value \"1\" by one client per proxy (-1: none)")
	flag.IntVar(&cfg.Lapsers, "lapsers", 2, "clients that let their locks lapse, then extend and release them (-1: none)")
	flag.IntVar(&cfg.Embedded, "embedded", 8, "clients of a proxy on its embedded memory node, restarted by the embedded-restart and embedded-stop faults (-1: no such proxy)")
	flag.IntVar(&cfg.RangeClients, "range-clients", 6, "range-lock clients spread over the proxies, with a range keeper if there are keepers (-1: none)")
	flag.IntVar(&cfg.RangeNames, "range-names", 3, "range-lock names they lock spans of")
	flag.BoolVar(&cfg.Plant, "plant-double-grant", false, "record a critical section taken without the lock: the checker must flag it")
	flag.StringVar(&cfg.LogDir, "log-dir", "", "when the history has a violation, save every process's whole output here (CHAOS_LOG_LEVEL=info for more of it)")
	doc := flag.String("doc", "", "rewrite the chaos section of this Markdown file")
	frontend := flag.String("frontend", "", `RESP front end of every proxy, "gnet" or "redcon" (default: the proxy's)`)
	proxyArgs := flag.String("proxy-args", "", "extra flags of every proxy, space-separated (e.g. -quorum-routing)")
	flag.Parse()
	if *kinds != "" {
		cfg.Kinds = strings.Split(*kinds, ",")
	} else if cfg.HA {
		cfg.Kinds = chaos.HAFaultKinds
	} else {
		cfg.Kinds = chaos.FaultKinds
	}
	if cfg.HA && cfg.EtcdBin == "" {
		bin, err := testproc.EtcdBin()
		if err != nil {
			fail(err)
		}
		cfg.EtcdBin = bin
	}
	cfg.ProxyArgs = strings.Fields(*proxyArgs)
	if *frontend != "" {
		cfg.ProxyArgs = append(cfg.ProxyArgs, "-frontend", *frontend)
	}
	cfg.Log = os.Stderr
	if cfg.WorkDir == "" {
		dir, err := os.MkdirTemp("", "chaos-")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(dir)
		cfg.WorkDir = dir
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "chaos: %v, %d proxies, %d clients, faults every %v: %s\n", cfg.Duration, cfg.Proxies, cfg.Clients, cfg.FaultEvery, strings.Join(cfg.Kinds, ","))
	res, err := chaos.Run(ctx, cfg)
	if err != nil {
		fail(err)
	}
	report := chaos.Report(cfg, res)
	fmt.Println(report)
	if *doc != "" {
		section := "chaos"
		if cfg.HA {
			section = "chaos-ha"
		}
		if err := docsection.Replace(*doc, "Reliability", section, report); err != nil {
			fail(err)
		}
	}
	if len(res.Violations) > 0 || res.Lapsed > 0 || res.Stuck > 0 {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "chaos:", err)
	os.Exit(2)
}
