// Command proxy is shiftlock-proxy: a Redis-compatible lock server for one
// host. Point Redis lock clients at it (redsync, redis-py Lock, node-redlock,
// SET NX PX plus compare-and-delete) and every lock runs as a ShiftLock
// reader-writer lock on a memory node; a client that has to wait is handed
// the lock by the previous holder instead of retrying.
//
//	proxy                                   # embedded memory node, 127.0.0.1:6380
//	proxy -memnode 10.0.0.5:7300 -peer-listen 0.0.0.0:7400 -fabric-secret-file /etc/shiftlock/fabric.secret -listen 0.0.0.0:6380 -requirepass s3cret
//
// A fabric across the network (a memory node, or a peer_listen, that is not
// on loopback) needs the fabric secret the memory nodes share; without it
// the proxy refuses to start, unless fabric_insecure says the network is
// trusted.
//
// On startup it prints "proxy listening on ADDR" to stdout with the actual
// address, so -listen 127.0.0.1:0 works in tests. SIGTERM, SIGINT or SIGHUP
// stop it: it turns not ready, refuses new connections and acquires, waits
// (up to drain_timeout) for the locks its clients hold to be released or
// expire, then closes connections, leaves its memory nodes and exits 0
// (docs/architecture.md, "Shutdown").
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/membership"
	"github.com/shiftlock/shiftlock-proxy/resp"
)

func main() { procutil.Main(run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, stderr)
	log, end, exit := procutil.Begin("proxy", err, cfg.LogLevel, cfg.CPUProfile, stderr)
	if log == nil {
		return exit
	}
	defer end()
	if err := fitMaxClients(&cfg, log); err != nil {
		log.Error("maxclients", zap.Error(err))
		return 2
	}
	if n := cfg.procs(); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	if open := cfg.openFabric(); len(open) > 0 {
		// Only fabric_insecure gets here (parseConfig).
		log.Warn("fabric_insecure: running the fabric across the network with no fabric secret: anyone who reaches it can read, free and forge every lock. "+procutil.FabricFix,
			zap.Strings("open", open))
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = host + ":" + strconv.Itoa(os.Getpid())
	}

	m := newMetrics()
	ms, closeHosts, err := members(cfg, log)
	if err != nil {
		log.Error("configuring memory nodes", zap.Error(err))
		return 1
	}
	defer closeHosts()
	if err := membership.JoinAll(ctx, ms); err != nil {
		log.Error("joining memory nodes", zap.Error(err))
		return 1
	}
	doms := make([]*lockmap.Domain, len(ms))
	route := cfg.QuorumRouting
	for i, mb := range ms {
		doms[i] = mb.Dom
		route = route && !mb.Solo // an embedded memory node has no other proxies
	}
	defer func() {
		for _, mb := range ms {
			mb.Close()
		}
	}()
	wait, _ := cfg.waitPolicy()
	// A routed acquire needs a wait budget (lockmap route.go): a RedLock
	// client's requests to several proxies meet at the key's home by
	// waiting there, first tries included.
	wait.WaitFirstTry = wait.WaitFirstTry || route
	lm := lockmap.New(doms, lockmap.Config{
		Logger:    log,
		OnAcquire: m.onAcquire,
		OnExpire:  func(string) { m.expired.Inc() },
		OnHoldEnd: m.onHoldEnd,
		Route:     route,
		RangeWait: cfg.rangeWait(),
	})
	defer lm.Close()
	sctx, stopSupervisors := context.WithCancel(context.Background())
	defer stopSupervisors()
	for _, mb := range ms {
		go mb.Supervise(sctx, lm, func() { m.rejoins.WithLabelValues(mb.Name).Inc(); m.watchDomain(lm, mb.Index) })
	}
	users, _ := cfg.respUsers()
	srv := resp.New(resp.Config{Map: lm, Wait: wait, Password: cfg.Requirepass, Users: users, Logger: log, OnCommand: m.onCommand,
		Frontend: cfg.Frontend, EventLoops: cfg.EventLoops, MaxClients: cfg.MaxClients, MaxOutputBytes: cfg.MaxOutputBytes,
		IdleTimeout: cfg.IdleTimeout, KeepAlive: keepAlive(cfg.TCPKeepAlive)})
	m.watch(srv, lm)

	if err := srv.Listen(cfg.Listen); err != nil {
		log.Error("listen", zap.Error(err))
		return 1
	}
	tlsCfg, err := cfg.tlsConfig()
	if err != nil {
		_ = srv.Close()
		log.Error("tls", zap.Error(err))
		return 1
	}
	if tlsCfg != nil {
		if err := srv.ListenTLS(cfg.TLSListen, tlsCfg); err != nil {
			_ = srv.Close()
			log.Error("tls listen", zap.Error(err))
			return 1
		}
		fmt.Fprintf(stdout, "proxy tls listening on %s\n", srv.TLSAddr())
	}
	addr := srv.Addr()
	if cfg.Requirepass == "" && len(users) == 0 && !isLoopback(addr) {
		log.Warn("serving without requirepass on a non-loopback address: anyone who can reach it can take and release locks",
			zap.String("addr", addr.String()))
	}
	var stopping atomic.Bool
	var msrv *procutil.MetricsServer
	if cfg.MetricsListen != "" {
		if msrv, err = procutil.ServeMetrics(cfg.MetricsListen, m.reg, log, func() error { return ready(lm, &stopping) }); err != nil {
			_ = srv.Close()
			log.Error("metrics listen", zap.Error(err))
			return 1
		}
		fmt.Fprintf(stdout, "metrics on %s\n", msrv.Addr())
	}
	names := make([]string, len(doms))
	for i, d := range doms {
		names[i] = d.Name
	}
	log.Info("proxy listening", zap.String("addr", addr.String()), zap.Strings("memnodes", names),
		zap.String("frontend", cfg.Frontend), zap.Int("event_loops", cfg.EventLoops), zap.Int("procs", runtime.GOMAXPROCS(0)), zap.Bool("inline_locks", lm.Inline()))
	fmt.Fprintf(stdout, "proxy listening on %s\n", addr)

	code := 0
	select {
	case <-ctx.Done():
		stopping.Store(true)
		drain(srv, lm, cfg.DrainTimeout, log)
	case err := <-srv.Done():
		log.Error("serve", zap.Error(err))
		code = 1
	}
	_ = srv.Close()
	msrv.Shutdown()
	return code
}

// drain is the first part of a shutdown (docs/architecture.md, "Shutdown"):
// the proxy is already not ready; it turns new connections and new acquires
// away, and waits until the locks its clients hold are released or expire
// and no acquire is queued any more, for at most timeout, or until a second
// signal. Leaving earlier would let the embedded memory node's locks vanish
// with the process, and on a shared memory node would have the proxy's
// holds recovered while their clients still count on them.
func drain(srv *resp.Server, lm *lockmap.Map, timeout time.Duration, log *zap.Logger) {
	srv.Drain()
	lm.Drain()
	// Spans of range locks count as locks held.
	held, queued := lm.Count()+lm.RangeCount(), srv.Blocked()
	if timeout == 0 || (held == 0 && queued == 0) {
		log.Info("shutting down", zap.Int("locks_held", held), zap.Int64("queued", queued))
		return
	}
	log.Info("shutting down: waiting for held locks to be released or expire (signal again to leave now)",
		zap.Int("locks_held", held), zap.Int64("queued", queued), zap.Duration("drain_timeout", timeout))
	again := make(chan os.Signal, 1)
	signal.Notify(again, procutil.StopSignals...)
	defer signal.Stop(again)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if lm.Count()+lm.RangeCount() == 0 && srv.Blocked() == 0 {
				log.Info("drained: no lock held, none queued")
				return
			}
		case <-deadline.C:
			log.Warn("drain timeout: leaving with locks still held", zap.Int("locks_held", lm.Count()+lm.RangeCount()), zap.Int64("queued", srv.Blocked()))
			return
		case <-again:
			log.Warn("second signal: leaving with locks still held", zap.Int("locks_held", lm.Count()+lm.RangeCount()), zap.Int64("queued", srv.Blocked()))
			return
		}
	}
}

// keepAlive maps tcp_keepalive (0: off) to resp.Config.KeepAlive (0:
// default, negative: off).
func keepAlive(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// ready is the proxy's readiness (/readyz): serving, not shutting down, and
// holding a valid lease with every memory node it joined (an embedded one
// has no lease to lose). A proxy between losing its membership and
// rejoining answers lock commands with TRYAGAIN, so a load balancer should
// look elsewhere meanwhile.
func ready(lm *lockmap.Map, stopping *atomic.Bool) error {
	if stopping.Load() {
		return errors.New("shutting down")
	}
	for _, d := range lm.Domains() {
		if d.Lease == nil {
			continue
		}
		if err := d.Lease.Valid(); err != nil {
			return fmt.Errorf("memory node %s: %w", d.Name, err)
		}
	}
	return nil
}

// nthPort offsets addr's port by i (a zero port stays zero).
func nthPort(addr string, i int) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("peer_listen %q: %w", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", fmt.Errorf("peer_listen %q: %w", addr, err)
	}
	if p != 0 {
		p += i
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
