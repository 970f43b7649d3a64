package ha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/memnode"
)

// ErrNotLeader means a write was refused because this node no longer leads
// its shard (its election key is gone: its etcd lease ran out).
var ErrNotLeader = errors.New("ha: no longer the shard's active memory node")

// LeaderConfig describes one memory node's candidacy for a shard.
type LeaderConfig struct {
	Shard string
	// Name identifies the node in the record and in logs.
	Name string
	// Advertise is the address proxies dial to reach this node.
	Advertise string
	// TTL is the etcd lease behind the candidacy (default 1s; etcd rounds
	// it up to whole seconds and to its own minimum). A dead active node is
	// replaced about TTL after it stopped renewing.
	TTL time.Duration
	// Patience is how long past the lease's expiry the node may go on
	// serving while it cannot reach etcd (default 0). A successor waits its
	// grace (horizon + dead_after) after the expiry before it admits
	// anyone, so any patience up to dead_after keeps generations apart; it
	// lets a leader ride out an etcd leader election.
	Patience time.Duration
	// ClockDrift is the clock-rate drift allowed between this host and
	// etcd's (default 1e-3, as the memory node's).
	ClockDrift float64
	Logger     *zap.Logger
}

// Leader is a won election: the right to serve the shard until Lost is
// closed. It implements memnode.StateStore over the shard's record, with
// every write conditional on still leading.
type Leader struct {
	cli  *clientv3.Client
	cfg  LeaderConfig
	sess *concurrency.Session
	elec *concurrency.Election
	key  string // the election key won with, and its creation revision
	rev  int64
	ttl  time.Duration

	// Serving is safe until validUntil, in nanoseconds since epoch on the
	// monotonic clock: a step of the wall clock must not stretch it.
	epoch      time.Time
	validUntil atomic.Int64
	lost       chan struct{}
	lostOnce   sync.Once
	why        atomic.Pointer[string]

	mu  sync.Mutex
	rec Record
}

// Campaign waits until this node leads shard (the previous leader resigned
// or its lease ran out), or ctx ends. It then keeps renewing its lease, and
// closes Lost as soon as it cannot be sure it still leads.
func Campaign(ctx context.Context, cli *clientv3.Client, cfg LeaderConfig) (*Leader, error) {
	if err := ValidShard(cfg.Shard); err != nil {
		return nil, err
	}
	if cfg.TTL <= 0 {
		cfg.TTL = time.Second
	}
	if cfg.ClockDrift <= 0 {
		cfg.ClockDrift = 1e-3
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	secs := int64(math.Ceil(cfg.TTL.Seconds()))
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	grant, err := cli.Grant(gctx, secs)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("ha: lease: %w", err)
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithLease(grant.ID))
	if err != nil {
		return nil, fmt.Errorf("ha: session: %w", err)
	}
	l := &Leader{cli: cli, cfg: cfg, sess: sess, ttl: time.Duration(grant.TTL) * time.Second, lost: make(chan struct{}), epoch: time.Now()}
	l.elec = concurrency.NewElection(sess, electionPrefix(cfg.Shard))
	cfg.Logger.Info("campaigning for shard", zap.String("shard", cfg.Shard), zap.Duration("lease", l.ttl))
	// A standby renews its lease itself while it waits, as the leader does:
	// the session's keep-alive gives up after one TTL without an answer
	// (an etcd member killed), the lease then expires, and a standby that
	// wins finds it gone and has to campaign again, which in CI added
	// 3.5 s to a failover.
	waiting := make(chan struct{})
	go l.renewUntil(ctx, waiting)
	won := make(chan error, 1)
	go func() { won <- l.elec.Campaign(ctx, cfg.Advertise) }()
	select {
	case err = <-won:
	case <-ctx.Done():
		// etcd's Campaign, cancelled, resigns with the client's own
		// context, which retries for as long as etcd is unreachable: a
		// standby told to stop would hang until etcd came back, or until
		// its client is closed. Return now and let the campaign end on
		// its own; if it won meanwhile, give the lead back.
		close(waiting)
		go func() {
			if <-won == nil {
				rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = l.elec.Resign(rctx)
				cancel()
			}
			_ = sess.Close()
		}()
		return nil, fmt.Errorf("ha: campaign: %w", ctx.Err())
	}
	close(waiting)
	if err != nil {
		_ = sess.Close()
		return nil, fmt.Errorf("ha: campaign: %w", err)
	}
	l.key, l.rev = l.elec.Key(), l.elec.Rev()
	// Campaign returns once every older candidate's key is gone; our own
	// lease may have run out meanwhile. A renewal now both proves it alive
	// and starts the validity clock.
	if err := l.renew(ctx); err != nil {
		_ = sess.Close()
		return nil, fmt.Errorf("ha: renewing after the election: %w", err)
	}
	go l.keep()
	return l, nil
}

// renew extends the lease once. The lease runs at etcd until at least the
// renewal's arrival plus its TTL, and the arrival is after the send: so
// from the send, TTL (less the drift) is a lower bound on the lease's life
// as etcd counts it.
func (l *Leader) renew(ctx context.Context) error {
	sent := time.Now()
	rctx, cancel := context.WithTimeout(ctx, l.ttl/2)
	resp, err := l.cli.KeepAliveOnce(rctx, l.sess.Lease())
	cancel()
	if err != nil {
		return err
	}
	life := time.Duration(resp.TTL) * time.Second
	safe := time.Duration(float64(life+l.cfg.Patience) * (1 - l.cfg.ClockDrift))
	if until := int64(sent.Sub(l.epoch) + safe); until > l.validUntil.Load() {
		l.validUntil.Store(until)
	}
	return nil
}

// validFor is how much longer serving is safe.
func (l *Leader) validFor() time.Duration {
	return time.Duration(l.validUntil.Load()) - time.Since(l.epoch)
}

// Valid reports whether serving is still safe: the lead is not known lost
// and the lease's validity has not run out, whether or not the keeper has
// noticed yet (a process that wakes from a pause runs its verb handlers and
// its timers in no particular order). It is memnode.Config.Valid.
func (l *Leader) Valid() bool {
	select {
	case <-l.lost:
		return false
	default:
	}
	return l.validFor() > 0
}

// keep deposes this leader when its validity runs out (a write that finds
// the election key gone deposes it too), while renew runs on its own
// goroutine: a renewal stuck on an etcd member that died must not hold up
// the deposition, which the successor's grace counts on to the moment. The
// session's own keep-alive is not a reason: clientv3 closes it when one TTL
// passes without an answer, as during an etcd leader election, while the
// lease lives on at etcd and a renewal may still reach it.
func (l *Leader) keep() {
	go l.renewals()
	for {
		wait := l.validFor()
		if wait <= 0 {
			l.lose("the etcd lease could not be renewed in time")
			return
		}
		deadline := time.NewTimer(wait)
		select {
		case <-l.lost:
			deadline.Stop()
			return
		case <-deadline.C:
			// loop: a renewal may have extended the validity meanwhile
		}
	}
}

// renewals renews the lease four times per TTL until the lead is lost.
func (l *Leader) renewals() { l.renewUntil(context.Background(), l.lost) }

// renewUntil renews the lease four times per TTL until done is closed or
// ctx ends.
func (l *Leader) renewUntil(ctx context.Context, done <-chan struct{}) {
	tick := time.NewTicker(l.ttl / 4)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := l.renew(ctx); err != nil {
				l.cfg.Logger.Warn("etcd lease renewal failed", zap.Error(err),
					zap.Duration("valid_for", l.validFor().Round(time.Millisecond)))
			}
		}
	}
}

func (l *Leader) lose(why string) {
	l.lostOnce.Do(func() {
		l.why.Store(&why)
		l.cfg.Logger.Warn("no longer the active memory node", zap.String("shard", l.cfg.Shard), zap.String("why", why))
		close(l.lost)
	})
}

// Lost is closed when this node can no longer be sure it leads the shard.
// The memory node must stop serving at once (memnode.Server.Depose).
func (l *Leader) Lost() <-chan struct{} { return l.lost }

// Why says why Lost was closed.
func (l *Leader) Why() string {
	if w := l.why.Load(); w != nil {
		return *w
	}
	return ""
}

// Take starts this node's generation: it reads the shard's record, computes
// the next generation (memnode.NextGeneration: a table above every fencing
// token handed out before, and a grace covering every lease the previous
// generation confirmed), writes the record naming this node as active, and
// returns cfg set up to serve it, with the record as its state store.
func (l *Leader) Take(ctx context.Context, cfg memnode.Config) (memnode.Config, time.Duration, error) {
	prev, existed, _, err := read(ctx, l.cli, l.cfg.Shard)
	if err != nil {
		return cfg, 0, err
	}
	next, grace := memnode.NextGeneration(prev.State, existed, cfg)
	rec := Record{State: next, Active: l.cfg.Advertise, Node: l.cfg.Name}
	if err := l.write(ctx, rec); err != nil {
		return cfg, 0, err
	}
	l.mu.Lock()
	l.rec = rec
	l.mu.Unlock()
	cfg.Generation = next.Generation
	cfg.RelBase = next.RelHighWater
	if until := time.Now().Add(grace); until.After(cfg.GraceUntil) {
		cfg.GraceUntil = until
	}
	cfg.Store = l
	cfg.Valid = l.Valid
	return cfg, grace, nil
}

// write stores rec if, and only if, this node's election key still exists
// with the revision it won with.
func (l *Leader) write(ctx context.Context, rec Record) error {
	select {
	case <-l.lost:
		return ErrNotLeader
	default:
	}
	rec.SavedAt = time.Now().UTC()
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, l.ttl)
	defer cancel()
	resp, err := l.cli.Txn(wctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)).
		Then(clientv3.OpPut(RecordKey(l.cfg.Shard), string(raw))).
		Commit()
	if err != nil {
		return fmt.Errorf("ha: writing the record: %w", err)
	}
	if !resp.Succeeded {
		l.lose("the election key is gone")
		return ErrNotLeader
	}
	return nil
}

// Update implements memnode.StateStore.
func (l *Leader) Update(f func(*memnode.State) bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := l.rec
	if !f(&next.State) {
		return nil
	}
	if err := l.write(context.Background(), next); err != nil {
		return err
	}
	l.rec = next
	return nil
}

// Get implements memnode.StateStore.
func (l *Leader) Get() memnode.State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec.State
}

// SetMembers records the proxies that are members now, if they changed.
func (l *Leader) SetMembers(ms []Member) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if equalMembers(ms, l.rec.Members) {
		return nil
	}
	next := l.rec
	next.Members = append([]Member(nil), ms...)
	if err := l.write(context.Background(), next); err != nil {
		return err
	}
	l.rec = next
	return nil
}

func equalMembers(a, b []Member) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Resign gives the shard up at once, so that a standby need not wait for the
// lease to run out. The caller stops serving first.
func (l *Leader) Resign(ctx context.Context) {
	l.lose("resigned")
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = l.elec.Resign(rctx)
	_ = l.sess.Close()
}
