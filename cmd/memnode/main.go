// Command memnode is the standalone lock-table host: it registers the lock
// table, the era counters and the node table, and serves them to proxies
// over the TCP soft-NIC (rdma/tcpfab).
//
//	memnode -config configs/memnode.yaml -listen 0.0.0.0:7300 -fabric-secret-file /etc/shiftlock/fabric.secret
//
// A listen address reachable from the network needs the fabric secret
// (fabric_secret_file), which every proxy shares; without one the memnode
// refuses to start, unless fabric_insecure says the network is trusted.
//
// On startup it prints "memnode listening on ADDR" (and "metrics on ADDR")
// to stdout with the actual addresses, so a port of 0 can be used. SIGTERM,
// SIGINT or SIGHUP stops it gracefully: it stops accepting, closes every
// connection and exits 0.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
	"github.com/shiftlock/shiftlock-proxy/rdma/verbs"
)

func main() { procutil.Main(run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, stderr)
	log, end, exit := procutil.Begin("memnode", err, cfg.LogLevel, cfg.CPUProfile, stderr)
	if log == nil {
		return exit
	}
	defer end()

	mcfg := memnode.Config{
		Entries:           cfg.Entries,
		Eras:              cfg.Eras,
		MaxNodes:          cfg.MaxNodes,
		MaxNodesPerHost:   cfg.MaxNodesPerHost,
		HeartbeatInterval: cfg.HeartbeatInterval,
		DeadAfter:         cfg.DeadAfter,
		PaperRecovery:     cfg.PaperRecovery,
		RangeBytes:        uint64(cfg.RangeTrees) * lockmap.RangeTreeBytes(),
		RangeTreeBytes:    lockmap.RangeTreeBytes(),
		Logger:            log,
	}
	// Restart logic (docs/reliability.md, "Safety", 6): with a state directory, each start is a
	// new generation whose table starts above every fencing token handed
	// out before, and joins wait until every lease the previous generation
	// may have backed has run out.
	mcfg.MaxLease = cfg.MaxLease
	if cfg.StateDir != "" {
		if cfg.RestartGrace > 0 {
			mcfg.GraceUntil = time.Now().Add(cfg.RestartGrace)
		}
		mcfg, err = memnode.Open(cfg.StateDir, mcfg)
		if err != nil {
			log.Error("state", zap.Error(err))
			return 1
		}
		log.Info("generation", zap.Uint64("generation", mcfg.Generation), zap.Uint64("relcnt_base", mcfg.RelBase),
			zap.Duration("restart_grace", graceLeft(mcfg.GraceUntil)))
	}
	if len(cfg.Etcd) > 0 {
		return runHA(ctx, cfg, mcfg, log, stdout)
	}
	var vs *verbs.Server
	if cfg.Fabric == "verbs" {
		mode, err := verbs.ParseLockTableMode(cfg.VerbsLockTable)
		if err == nil {
			vs, err = verbs.NewServer(verbs.ServerConfig{
				DeviceConfig: verbs.DeviceConfig{Device: cfg.VerbsDevice, Port: cfg.VerbsPort, GID: cfg.VerbsGID},
				LockTable:    mode, Logger: log.Named("verbs")})
		}
		if err != nil {
			log.Error("verbs", zap.Error(err))
			return 1
		}
		// The regions live where the device can be given them.
		mcfg.Alloc = vs.Alloc
	}
	host := memnode.New(mcfg)
	defer host.Close()

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		log.Error("listen", zap.Error(err))
		return 1
	}
	var served rdma.Host = host
	if vs != nil {
		served = vs.Host(host)
	}
	srv, err := fabricServer(served, cfg, ln, log)
	if err != nil {
		_ = ln.Close()
		log.Error("fabric secret", zap.Error(err))
		return 1
	}
	if vs != nil {
		// After the TCP server, whose ATTACH requests set members' queue
		// pairs up, and closed after it (deferred first, runs last).
		defer vs.Close()
		if err := vs.Serve(host, srv); err != nil {
			_ = ln.Close()
			log.Error("verbs", zap.Error(err))
			return 1
		}
	}

	var metrics *procutil.MetricsServer
	if cfg.MetricsListen != "" {
		if metrics, err = procutil.ServeMetrics(cfg.MetricsListen, registry(host, srv), log, nil); err != nil {
			_ = ln.Close()
			log.Error("metrics listen", zap.Error(err))
			return 1
		}
		log.Info("metrics on", zap.String("addr", metrics.Addr().String()))
		fmt.Fprintf(stdout, "metrics on %s\n", metrics.Addr())
	}

	log.Info("memnode listening", zap.String("addr", ln.Addr().String()), zap.String("fabric", cfg.Fabric),
		zap.Uint64("entries", cfg.Entries), zap.Uint64("eras", cfg.Eras), zap.Int("max_nodes", cfg.MaxNodes),
		zap.Duration("heartbeat_interval", cfg.HeartbeatInterval), zap.Duration("dead_after", cfg.DeadAfter),
		zap.Bool("paper_recovery", cfg.PaperRecovery))
	fmt.Fprintf(stdout, "memnode listening on %s\n", ln.Addr())

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	code := 0
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-serveErr:
		log.Error("serve", zap.Error(err))
		code = 1
	}
	_ = srv.Close()
	metrics.Shutdown()
	return code
}

// fabricServer serves host's verbs on ln, behind the fabric secret if one
// is configured.
func fabricServer(host rdma.Host, cfg config, ln net.Listener, log *zap.Logger) (*tcpfab.Server, error) {
	srv := tcpfab.NewServer(host, log)
	secret, err := procutil.ReadSecret(cfg.FabricSecretFile)
	if err != nil {
		return nil, err
	}
	if secret != nil {
		srv.RequireSecret(secret)
	} else if !isLoopbackAddr(ln.Addr()) {
		// Only fabric_insecure gets here (config.validate).
		log.Warn("fabric_insecure: serving the lock table with no fabric secret on an address reachable from the network: "+
			"anyone who reaches it can read, free and forge every lock, and take every node ID. "+procutil.FabricFix,
			zap.String("addr", ln.Addr().String()))
	}
	return srv, nil
}

func isLoopbackAddr(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// graceLeft is the restart grace still to wait: none for a first start,
// whose GraceUntil is zero (it logged -2562047h47m16.854775808s).
func graceLeft(until time.Time) time.Duration {
	return max(0, time.Until(until)).Round(time.Millisecond)
}
