package main

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/ha"
	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/membership"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
	"github.com/shiftlock/shiftlock-proxy/rdma/verbs"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// peerRefusals counts, for the whole process, the connections to its peer
// ports that failed the fabric secret's challenge: every membership (one
// peer port per memory node, a new one on each rejoin) adds to it.
var peerRefusals tcpfab.Refusals

// members describes one membership per configured memory node, or one
// embedded memory node if none is configured.
func members(cfg config, log *zap.Logger) ([]*membership.Member, func(), error) {
	slcfg := shiftlock.Config{Threshold: cfg.Threshold, Logger: log}
	if cfg.embedded() {
		// The table dies with the process, so the state directory carries
		// what the next start owes this one: tokens above every token
		// handed out, and no grant until every lock granted may have run
		// out (memnode.Open).
		mcfg, err := memnode.Open(cfg.StateDir, memnode.Config{Entries: cfg.Entries, RangeBytes: uint64(cfg.RangeTrees) * lockmap.RangeTreeBytes(), RangeTreeBytes: lockmap.RangeTreeBytes(),
			DeadAfter: membership.SoloForever, MaxLease: membership.SoloForever, Solo: true, Logger: log.Named("memnode")})
		if err != nil {
			return nil, nil, err
		}
		if wait := time.Until(mcfg.GraceUntil); wait > 0 {
			log.Warn("restart grace: locks the previous run granted may still be held; serving no lock until they have run out",
				zap.String("state_dir", cfg.StateDir), zap.Uint64("generation", mcfg.Generation), zap.Duration("grace", wait.Round(time.Millisecond)))
		}
		host := memnode.New(mcfg)
		fab := memfab.New(host)
		mb := &membership.Member{Name: "embedded", Solo: true, Config: slcfg, Log: log,
			Join: func(context.Context) (rdma.Endpoint, error) { return fab.Join(cfg.Name) }}
		return []*membership.Member{mb}, host.Close, nil
	}
	secret, err := procutil.ReadSecret(cfg.FabricSecretFile)
	if err != nil {
		return nil, nil, err
	}
	if len(cfg.Shards) > 0 {
		return shardMembers(cfg, slcfg, secret, log)
	}
	var ms []*membership.Member
	for i, addr := range cfg.Memnodes {
		peer, err := nthPort(cfg.PeerListen, i)
		if err != nil {
			return nil, nil, err
		}
		addr := addr
		ms = append(ms, &membership.Member{Index: i, Name: addr, Config: slcfg, Log: log, Recognise: cfg.recognisesOwners(),
			Join: func(ctx context.Context) (rdma.Endpoint, error) {
				ep, err := dialFabric(ctx, cfg, addr, tcpfab.Config{Name: cfg.Name, PeerListen: peer, Advertise: cfg.Advertise, Logger: log.Named("tcpfab"), Secret: secret, Refusals: &peerRefusals})
				if err != nil {
					return nil, fmt.Errorf("memnode %s: %w", addr, err)
				}
				return ep, nil
			}})
	}
	return ms, func() {}, nil
}

// shardMembers describes one membership per shard, each joining whichever
// memory node etcd names as the shard's active one.
func shardMembers(cfg config, slcfg shiftlock.Config, secret []byte, log *zap.Logger) ([]*membership.Member, func(), error) {
	cli, err := ha.Dial(cfg.Etcd, log.Named("etcd"))
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var ms []*membership.Member
	for i, shard := range cfg.Shards {
		peer, err := nthPort(cfg.PeerListen, i)
		if err != nil {
			cancel()
			_ = cli.Close()
			return nil, nil, err
		}
		follow := ha.Follow(ctx, cli, shard, log.Named("ha"))
		mb := &membership.Member{Index: i, Name: shard, Config: slcfg, Log: log, Recognise: cfg.recognisesOwners(), Follow: follow}
		mb.Join = func(ctx context.Context) (rdma.Endpoint, error) {
			rec, ok := follow.Current()
			for !ok {
				select {
				case <-ctx.Done():
					return nil, fmt.Errorf("%w: shard %s: no memory node recorded in etcd yet", rdma.ErrUnavailable, shard)
				case <-follow.Changed():
				}
				rec, ok = follow.Current()
			}
			if secret == nil && !procutil.Loopback(rec.Active) {
				// As openFabric does for memnodes, once etcd names one.
				if !cfg.FabricInsecure {
					return nil, fmt.Errorf("%w: shard %s: memory node %s is across the network, and fabric_secret_file is not set. %s",
						membership.ErrOpenFabric, shard, rec.Active, procutil.FabricFix)
				}
				log.Warn("fabric_insecure: joining a memory node across the network with no fabric secret", zap.String("shard", shard), zap.String("memnode", rec.Active))
			}
			ep, err := dialFabric(ctx, cfg, rec.Active, tcpfab.Config{Name: cfg.Name, PeerListen: peer, Advertise: cfg.Advertise, Logger: log.Named("tcpfab"), Secret: secret, Refusals: &peerRefusals})
			if err != nil {
				return nil, fmt.Errorf("shard %s, memnode %s: %w", shard, rec.Active, err)
			}
			// A deposed node refuses verbs by itself; the generation check
			// also keeps away one that etcd no longer names.
			if g := ep.Layout().Generation; g != rec.Generation {
				_ = ep.Close()
				return nil, fmt.Errorf("%w: shard %s: memory node %s is generation %d, etcd names generation %d", rdma.ErrUnavailable, shard, rec.Active, g, rec.Generation)
			}
			mb.Joined(rec)
			return ep, nil
		}
		ms = append(ms, mb)
	}
	return ms, func() { cancel(); _ = cli.Close() }, nil
}

// dialFabric joins the memory node at addr on the configured fabric: tcpfab,
// or RDMA queue pairs (rdma/verbs), which set up over the same TCP control
// port with the same secret.
func dialFabric(ctx context.Context, cfg config, addr string, tc tcpfab.Config) (rdma.Endpoint, error) {
	if cfg.Fabric != "verbs" {
		ep, err := tcpfab.Dial(ctx, addr, tc)
		if err != nil {
			return nil, err
		}
		return ep, nil
	}
	tc.Logger = tc.Logger.Named("verbs")
	return verbs.Join(ctx, addr, verbs.Config{
		DeviceConfig: verbs.DeviceConfig{Device: cfg.VerbsDevice, Port: cfg.VerbsPort, GID: cfg.VerbsGID},
		Control:      tc,
	})
}
