package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/ha"
	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
	"github.com/shiftlock/shiftlock-proxy/memnode"
)

// runHA is the memory node with its state in etcd: it campaigns for its
// shard, serves one generation for as long as it leads, and goes back to
// standing by when it loses the lead. It never serves a table while it is
// not sure it leads: the successor's record is the only one proxies join.
//
// A standby holds no port: the listen address is bound only while active,
// so that a proxy with an old record fails fast instead of waiting on a
// node that will not answer.
func runHA(ctx context.Context, cfg config, mcfg memnode.Config, log *zap.Logger, stdout io.Writer) int {
	cli, err := ha.Dial(cfg.Etcd, log.Named("etcd"))
	if err != nil {
		log.Error("etcd", zap.Error(err))
		return 1
	}
	defer cli.Close()
	// Bind once to learn the address (a port of 0 picks one), then let it
	// go until this node leads.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		log.Error("listen", zap.Error(err))
		return 1
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	adv := cfg.Advertise
	if adv == "" {
		adv = addr
	}
	patience := cfg.EtcdPatience
	if patience == 0 {
		patience = cfg.DeadAfter
	}
	lcfg := ha.LeaderConfig{Shard: cfg.Shard, Name: adv, Advertise: adv, TTL: cfg.EtcdLease,
		Patience: patience, Logger: log.Named("ha")}
	fmt.Fprintf(stdout, "memnode standby for shard %s at %s\n", cfg.Shard, addr)
	log.Info("memnode standing by", zap.String("shard", cfg.Shard), zap.String("addr", addr), zap.Strings("etcd", cfg.Etcd))
	for ctx.Err() == nil {
		l, err := ha.Campaign(ctx, cli, lcfg)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("campaign failed; retrying", zap.Error(err))
				sleep(ctx, 500*time.Millisecond)
			}
			continue
		}
		if code, again := serveTerm(ctx, cfg, mcfg, l, addr, log, stdout); !again {
			return code
		}
		fmt.Fprintf(stdout, "memnode standby for shard %s at %s\n", cfg.Shard, addr)
	}
	return 0
}

// serveTerm serves one generation while l leads. It reports whether to
// stand by again (the lead was lost) or exit with code.
func serveTerm(ctx context.Context, cfg config, mcfg memnode.Config, l *ha.Leader, addr string, log *zap.Logger, stdout io.Writer) (code int, again bool) {
	mc, grace, err := l.Take(ctx, mcfg)
	if err != nil {
		log.Warn("could not start a generation", zap.Error(err))
		l.Resign(context.Background())
		return 0, true
	}
	host := memnode.New(mc)
	defer host.Close()
	ln, err := listenRetry(ctx, addr)
	if err != nil {
		host.Depose("cannot listen")
		l.Resign(context.Background())
		log.Error("listen", zap.Error(err))
		return 1, false
	}
	srv, err := fabricServer(host, cfg, ln, log)
	if err != nil {
		_ = ln.Close()
		host.Depose("bad fabric secret")
		l.Resign(context.Background())
		log.Error("fabric secret", zap.Error(err))
		return 1, false
	}
	var metrics *procutil.MetricsServer
	if cfg.MetricsListen != "" {
		if metrics, err = procutil.ServeMetrics(cfg.MetricsListen, registry(host, srv), log, nil); err != nil {
			log.Warn("metrics listen", zap.Error(err))
		} else {
			fmt.Fprintf(stdout, "metrics on %s\n", metrics.Addr())
		}
	}
	log.Info("memnode active", zap.String("shard", cfg.Shard), zap.String("addr", addr),
		zap.Uint64("generation", mc.Generation), zap.Uint64("relcnt_base", mc.RelBase),
		zap.Duration("grace", grace.Round(time.Millisecond)))
	fmt.Fprintf(stdout, "memnode listening on %s\n", addr)
	fmt.Fprintf(stdout, "memnode active for shard %s, generation %d, grace %v\n", cfg.Shard, mc.Generation, grace.Round(time.Millisecond))

	// Stop serving the moment the lead is lost, whatever this loop is
	// doing: recording members in etcd can block for a lease's length on an
	// etcd member that died, and the successor's grace leaves no room for
	// that (docs/reliability.md, "Why two generations never grant at once").
	termDone := make(chan struct{})
	defer close(termDone)
	go func() {
		select {
		case <-l.Lost():
			host.Depose(l.Why())
		case <-termDone:
		}
	}()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			// Stop serving before giving the shard up, so that the
			// successor is never admitted while this table still answers.
			host.Depose("shutting down")
			_ = srv.Close()
			metrics.Shutdown()
			l.Resign(context.Background())
			log.Info("shutting down")
			return 0, false
		case <-l.Lost():
			host.Depose(l.Why())
			_ = srv.Close()
			metrics.Shutdown()
			// Let the old candidacy go for good: its session would
			// otherwise go on renewing the lease whenever etcd answers,
			// and keep the shard's election key, with nobody serving it.
			l.Resign(context.Background())
			log.Warn("lost the shard; standing by again", zap.String("why", l.Why()))
			return 0, true
		case err := <-served:
			host.Depose("serve failed")
			_ = srv.Close()
			metrics.Shutdown()
			l.Resign(context.Background())
			log.Error("serve", zap.Error(err))
			return 1, false
		case <-tick.C:
			peers := host.Peers()
			ms := make([]ha.Member, len(peers))
			for i, p := range peers {
				ms[i] = ha.Member{Node: uint16(p.Node), Addr: p.Addr}
			}
			if err := l.SetMembers(ms); err != nil {
				log.Warn("recording members in etcd", zap.Error(err))
			}
		}
	}
}

func listenRetry(ctx context.Context, addr string) (net.Listener, error) {
	var err error
	for i := 0; i < 50 && ctx.Err() == nil; i++ {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return nil, err
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
