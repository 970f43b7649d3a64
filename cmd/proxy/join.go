package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/ha"
	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
	"github.com/shiftlock/shiftlock-proxy/rdma/verbs"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// member is the proxy's membership in one memory node: how to (re)join it,
// and what to tear down when the membership ends.
type member struct {
	index int
	name  string
	join  func(ctx context.Context) (rdma.Endpoint, error)
	solo  bool
	// recognise turns on owner recognition (redlock_quorum).
	recognise bool
	cfg       shiftlock.Config
	log       *zap.Logger

	dom   *lockmap.Domain
	close func()

	// follow, for a shard joined through etcd, tracks its record; at is
	// the record of the memory node joined.
	follow *ha.Follower
	at     ha.Record
}

// superseded reports why the joined memory node is no longer the shard's
// active one, or nil. Its successor is admitting members (or soon will), and
// the old node stops serving by itself; leaving at once saves the wait for
// its heartbeats to fail.
func (mb *member) superseded() error {
	if mb.follow == nil {
		return nil
	}
	cur, ok := mb.follow.Current()
	if !ok || (cur.Active == mb.at.Active && cur.Generation == mb.at.Generation) {
		return nil
	}
	return fmt.Errorf("shard %s: etcd names %s generation %d, not %s generation %d", mb.name, cur.Active, cur.Generation, mb.at.Active, mb.at.Generation)
}

// changed is closed when the shard's record changes (never, without etcd).
func (mb *member) changed() <-chan struct{} {
	if mb.follow == nil {
		return nil
	}
	return mb.follow.Changed()
}

// connect joins once and builds the lock domain on top of the endpoint.
func (mb *member) connect(ctx context.Context) error {
	ep, err := mb.join(ctx)
	if err != nil {
		return err
	}
	// Waiters check for failures as often as members heartbeat, and suspect
	// a silent blocker they cannot name once dead_after has passed: the
	// memory node's probes make an early request safe, only wasteful.
	cfg := mb.cfg
	l := ep.Layout()
	cfg.CheckInterval, cfg.StaleAfter = l.HeartbeatInterval, l.DeadAfter
	if mb.solo {
		// The embedded memory node never declares anyone dead (see
		// members); a wait that stops moving is still worth a look.
		cfg.StaleAfter = soloStaleAfter
	}
	// Owner tags let other proxies recognise a RedLock client asking through
	// them too, where the operator says RedLock clients use several proxies:
	// otherwise two clients that use the same value through two proxies
	// would both hold the key. An embedded memory node has no other proxies.
	cfg.OwnerTags = !mb.solo && mb.recognise
	c := shiftlock.NewClient(ep, cfg)
	var lease *lockmap.Lease
	if mb.solo {
		lease = lockmap.NewSoloLease(ep, soloMargin)
	} else {
		lease = lockmap.NewLease(ep)
	}
	mb.dom = &lockmap.Domain{Name: mb.name, Client: c, Lease: lease}
	mb.close = func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = c.Close(cctx)
		cancel()
		lease.Stop()
		_ = ep.Close()
	}
	mb.log.Info("joined memory node", zap.String("memnode", mb.name), zap.Uint16("node", uint16(ep.Node())),
		zap.Uint64("entries", ep.Layout().LockEntries), zap.Uint64("generation", ep.Layout().Generation))
	return nil
}

// supervise rejoins whenever the membership dies: the memory node declared
// this proxy dead (after a pause or a partition), or the memory node itself
// went away (a restart loses its table). Every hold of the old membership is
// void; the map drops it and reports it lost. Joins are retried with backoff,
// since a restarted memory node refuses them during its restart grace.
func (mb *member) supervise(ctx context.Context, m *lockmap.Map, rejoins func()) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		why := mb.dom.Lease.Dead()
		if why == nil {
			why = mb.superseded()
		}
		if why == nil {
			continue
		}
		mb.log.Warn("membership lost; rejoining", zap.String("memnode", mb.name), zap.Error(why))
		// The old membership is void: close it first, which also frees its
		// peer port for the new one.
		mb.close()
		backoff := 50 * time.Millisecond
		for {
			jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := mb.connect(jctx)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			// A memory node in its grace answers at once and cheaply; keep
			// asking often so that the first grant after it is not late,
			// even when the backoff grew while the old node was gone.
			wait := backoff
			if errors.Is(err, rdma.ErrUnavailable) {
				wait = min(wait, graceRetry)
			}
			mb.log.Info("rejoin failed; will retry", zap.String("memnode", mb.name), zap.Duration("in", wait), zap.Error(err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			case <-mb.changed():
				// a new active memory node: try it now
			}
			backoff = min(2*backoff, 2*time.Second)
		}
		if lost, err := m.Replace(mb.index, mb.dom); err != nil {
			mb.log.Error("cannot use the rejoined memory node", zap.String("memnode", mb.name), zap.Error(err))
		} else if lost > 0 {
			mb.log.Warn("locks lost with the old membership", zap.String("memnode", mb.name), zap.Int("lost", lost))
		}
		rejoins()
	}
}

// graceRetry is how often a proxy asks a memory node that refuses joins
// during its grace.
const graceRetry = 50 * time.Millisecond

// An embedded memory node shares the proxy's fate: a pause stops both, and
// the table ends with the process. Declaring its only member dead after a
// pause (a stopped container, a throttled cgroup, a debugger) would throw
// away every lock with nobody to give them to, and keep the entries
// reserved for the dead member's horizon; Redis keeps its keys across a
// pause. The lease cap likewise only bounds what other members or a
// restarted memory node would wait for. Both are made longer than a
// process lives, which switches them off without a second code path.
const (
	soloForever    = 365 * 24 * time.Hour
	soloStaleAfter = time.Second
	// soloMargin is what the embedded memory node's horizon adds to the
	// longest TTL, so that its beats (every 100 ms) cover the next grant
	// without a push; a restart waits that much longer.
	soloMargin = 250 * time.Millisecond
)

// peerRefusals counts, for the whole process, the connections to its peer
// ports that failed the fabric secret's challenge: every membership (one
// peer port per memory node, a new one on each rejoin) adds to it.
var peerRefusals tcpfab.Refusals

// members describes one membership per configured memory node, or one
// embedded memory node if none is configured.
func members(cfg config, log *zap.Logger) ([]*member, func(), error) {
	slcfg := shiftlock.Config{Threshold: cfg.Threshold, Logger: log}
	if cfg.embedded() {
		// The table dies with the process, so the state directory carries
		// what the next start owes this one: tokens above every token
		// handed out, and no grant until every lock granted may have run
		// out (memnode.Open).
		mcfg, err := memnode.Open(cfg.StateDir, memnode.Config{Entries: cfg.Entries, RangeBytes: uint64(cfg.RangeTrees) * lockmap.RangeTreeBytes(), RangeTreeBytes: lockmap.RangeTreeBytes(),
			DeadAfter: soloForever, MaxLease: soloForever, Solo: true, Logger: log.Named("memnode")})
		if err != nil {
			return nil, nil, err
		}
		if wait := time.Until(mcfg.GraceUntil); wait > 0 {
			log.Warn("restart grace: locks the previous run granted may still be held; serving no lock until they have run out",
				zap.String("state_dir", cfg.StateDir), zap.Uint64("generation", mcfg.Generation), zap.Duration("grace", wait.Round(time.Millisecond)))
		}
		host := memnode.New(mcfg)
		fab := memfab.New(host)
		mb := &member{name: "embedded", solo: true, cfg: slcfg, log: log,
			join: func(context.Context) (rdma.Endpoint, error) { return fab.Join(cfg.Name) }}
		return []*member{mb}, host.Close, nil
	}
	secret, err := procutil.ReadSecret(cfg.FabricSecretFile)
	if err != nil {
		return nil, nil, err
	}
	if len(cfg.Shards) > 0 {
		return shardMembers(cfg, slcfg, secret, log)
	}
	var ms []*member
	for i, addr := range cfg.Memnodes {
		peer, err := nthPort(cfg.PeerListen, i)
		if err != nil {
			return nil, nil, err
		}
		addr := addr
		ms = append(ms, &member{index: i, name: addr, cfg: slcfg, log: log, recognise: cfg.recognisesOwners(),
			join: func(ctx context.Context) (rdma.Endpoint, error) {
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
func shardMembers(cfg config, slcfg shiftlock.Config, secret []byte, log *zap.Logger) ([]*member, func(), error) {
	cli, err := ha.Dial(cfg.Etcd, log.Named("etcd"))
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var ms []*member
	for i, shard := range cfg.Shards {
		peer, err := nthPort(cfg.PeerListen, i)
		if err != nil {
			cancel()
			_ = cli.Close()
			return nil, nil, err
		}
		mb := &member{index: i, name: shard, cfg: slcfg, log: log, recognise: cfg.recognisesOwners(), follow: ha.Follow(ctx, cli, shard, log.Named("ha"))}
		mb.join = func(ctx context.Context) (rdma.Endpoint, error) {
			rec, ok := mb.follow.Current()
			for !ok {
				select {
				case <-ctx.Done():
					return nil, fmt.Errorf("%w: shard %s: no memory node recorded in etcd yet", rdma.ErrUnavailable, shard)
				case <-mb.follow.Changed():
				}
				rec, ok = mb.follow.Current()
			}
			if secret == nil && !procutil.Loopback(rec.Active) {
				// As openFabric does for memnodes, once etcd names one.
				if !cfg.FabricInsecure {
					return nil, fmt.Errorf("%w: shard %s: memory node %s is across the network, and fabric_secret_file is not set. %s",
						errOpenFabric, shard, rec.Active, procutil.FabricFix)
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
			mb.at = rec
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

// errOpenFabric is a join refused because it would run the fabric across
// the network with no secret: a setting to fix, not a state to wait out.
var errOpenFabric = errors.New("refusing an unauthenticated fabric across the network")

// joinAll joins every memory node once at startup. A memory node that
// answers ErrUnavailable (in its restart grace, which lasts as long as the
// locks of its previous run may, or deposed during a failover) is asked
// again until it admits the proxy, however long that takes: starting to
// serve before would grant locks that may still be held. For a shard, an
// active memory node that cannot be reached is retried for up to a minute
// (a failover may be under way); any other error, and a fabric that would
// run across the network without a secret, ends the start.
func joinAll(ctx context.Context, ms []*member) error {
	for _, mb := range ms {
		deadline := time.Now().Add(time.Minute)
		var logged time.Time
		for {
			jctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := mb.connect(jctx)
			cancel()
			if err == nil {
				break
			}
			grace := errors.Is(err, rdma.ErrUnavailable) && !errors.Is(err, errOpenFabric)
			if (!grace && (mb.follow == nil || time.Now().After(deadline) || errors.Is(err, errOpenFabric))) || ctx.Err() != nil {
				return err
			}
			if time.Since(logged) >= 5*time.Second {
				logged = time.Now()
				mb.log.Info("memory node not ready; retrying", zap.String("memnode", mb.name), zap.Error(err))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(graceRetry):
			}
		}
	}
	return nil
}
