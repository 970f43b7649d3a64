// Package membership keeps a proxy's membership in each of its memory nodes
// alive: it joins (JoinAll, waiting out a memory node's restart grace),
// builds the lock domain of each membership (a ShiftLock client and its
// lease), and, once a membership dies, rejoins and hands the new domain to
// the lock table (Member.Supervise). A membership dies when the memory node
// declares the proxy dead (after a pause or a partition), when the memory
// node itself goes away (a restart loses its table), or, for a shard whose
// memory node etcd names, when etcd names another one. Every hold of a dead
// membership is void; the lock table drops it and reports it lost.
//
// How to reach a memory node (an embedded one, tcpfab, RDMA verbs, a shard
// through etcd) is the command's business: it gives each Member a Join.
package membership

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/ha"
	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// Member is the proxy's membership in one memory node: how to (re)join it,
// and what to tear down when the membership ends.
type Member struct {
	// Index is the memory node's place in the lock table (lockmap.New's
	// domains, Map.Replace).
	Index int
	Name  string
	// Join makes a new membership: an endpoint of the memory node.
	Join func(ctx context.Context) (rdma.Endpoint, error)
	// Solo: an embedded memory node, whose only member is this proxy.
	Solo bool
	// Recognise turns on owner recognition (redlock_quorum).
	Recognise bool
	// Config is the ShiftLock client's; Connect sets its failure checks
	// from the memory node's layout.
	Config shiftlock.Config
	Log    *zap.Logger
	// Follow, for a shard joined through etcd, tracks its record; nil
	// otherwise.
	Follow Follower

	// Dom is the current membership's lock domain (set by Connect).
	Dom   *lockmap.Domain
	close func(retire bool)
	// at is the record of the memory node joined (Joined).
	at ha.Record
}

// Follower is what a member needs of ha.Follower: the shard's record, and
// a channel closed when it changes.
type Follower interface {
	Current() (ha.Record, bool)
	Changed() <-chan struct{}
}

// Replacer is the lock table's side of a rejoin (lockmap.Map.Replace):
// take the new domain at index i, and report how many holds of the old one
// were lost.
type Replacer interface {
	Replace(i int, d *lockmap.Domain) (lost int, err error)
}

// Joined notes the shard record whose memory node Join joined; until etcd
// names another, the membership stands.
func (mb *Member) Joined(rec ha.Record) { mb.at = rec }

// superseded reports why the joined memory node is no longer the shard's
// active one, or nil. Its successor is admitting members (or soon will), and
// the old node stops serving by itself; leaving at once saves the wait for
// its heartbeats to fail.
func (mb *Member) superseded() error {
	if mb.Follow == nil {
		return nil
	}
	cur, ok := mb.Follow.Current()
	if !ok || (cur.Active == mb.at.Active && cur.Generation == mb.at.Generation) {
		return nil
	}
	return fmt.Errorf("shard %s: etcd names %s generation %d, not %s generation %d", mb.Name, cur.Active, cur.Generation, mb.at.Active, mb.at.Generation)
}

// changed is closed when the shard's record changes (never, without etcd).
func (mb *Member) changed() <-chan struct{} {
	if mb.Follow == nil {
		return nil
	}
	return mb.Follow.Changed()
}

// connectWithin is Connect, given up after timeout.
func (mb *Member) connectWithin(ctx context.Context, timeout time.Duration) error {
	jctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return mb.Connect(jctx)
}

// Connect joins once and builds the lock domain on top of the endpoint.
func (mb *Member) Connect(ctx context.Context) error {
	ep, err := mb.Join(ctx)
	if err != nil {
		return err
	}
	// Waiters check for failures as often as members heartbeat, and suspect
	// a silent blocker they cannot name once dead_after has passed: the
	// memory node's probes make an early request safe, only wasteful.
	cfg := mb.Config
	l := ep.Layout()
	cfg.CheckInterval, cfg.StaleAfter = l.HeartbeatInterval, l.DeadAfter
	if mb.Solo {
		// The embedded memory node never declares anyone dead (see
		// SoloForever); a wait that stops moving is still worth a look.
		cfg.StaleAfter = soloStaleAfter
	}
	// Owner tags let other proxies recognise a RedLock client asking through
	// them too, where the operator says RedLock clients use several proxies:
	// otherwise two clients that use the same value through two proxies
	// would both hold the key. An embedded memory node has no other proxies.
	cfg.OwnerTags = !mb.Solo && mb.Recognise
	c := shiftlock.NewClient(ep, cfg)
	var lease *lockmap.Lease
	if mb.Solo {
		lease = lockmap.NewSoloLease(ep, soloMargin)
	} else {
		lease = lockmap.NewLease(ep)
	}
	mb.Dom = &lockmap.Domain{Name: mb.Name, Client: c, Lease: lease}
	mb.close = func(retire bool) {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if retire && lease.Dead() == nil {
			// The memory node keeps the last beat's horizon for the node,
			// which should not count room for grants it will never make
			// (lockmap.Lease.Retire).
			_ = lease.Retire(cctx)
		}
		_ = c.Close(cctx)
		cancel()
		lease.Stop()
		_ = ep.Close()
	}
	mb.Log.Info("joined memory node", zap.String("memnode", mb.Name), zap.Uint16("node", uint16(ep.Node())),
		zap.Uint64("entries", ep.Layout().LockEntries), zap.Uint64("generation", ep.Layout().Generation))
	return nil
}

// Close ends the current membership: the client, its lease, the endpoint.
// Its last beat counts only the locks still held through it.
func (mb *Member) Close() { mb.end(true) }

// end is Close; retire is false for a membership that is already void
// (dead, or on a memory node that was deposed), which would only delay the
// rejoin by waiting for a beat.
func (mb *Member) end(retire bool) {
	if mb.close != nil {
		mb.close(retire)
	}
}

// Supervise rejoins whenever the membership dies, until ctx ends, and hands
// each new domain to m, then calls rejoins. Joins are retried with backoff,
// since a restarted memory node refuses them during its restart grace.
func (mb *Member) Supervise(ctx context.Context, m Replacer, rejoins func()) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		why := mb.Dom.Lease.Dead()
		if why == nil {
			why = mb.superseded()
		}
		if why == nil {
			continue
		}
		mb.Log.Warn("membership lost; rejoining", zap.String("memnode", mb.Name), zap.Error(why))
		// The old membership is void: close it first, which also frees its
		// peer port for the new one.
		mb.end(false)
		backoff := 50 * time.Millisecond
		for {
			err := mb.connectWithin(ctx, 5*time.Second)
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
				wait = min(wait, GraceRetry)
			}
			mb.Log.Info("rejoin failed; will retry", zap.String("memnode", mb.Name), zap.Duration("in", wait), zap.Error(err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			case <-mb.changed():
				// a new active memory node: try it now
			}
			backoff = min(2*backoff, 2*time.Second)
		}
		if lost, err := m.Replace(mb.Index, mb.Dom); err != nil {
			mb.Log.Error("cannot use the rejoined memory node", zap.String("memnode", mb.Name), zap.Error(err))
		} else if lost > 0 {
			mb.Log.Warn("locks lost with the old membership", zap.String("memnode", mb.Name), zap.Int("lost", lost))
		}
		rejoins()
	}
}

// GraceRetry is how often a proxy asks a memory node that refuses joins
// during its grace.
const GraceRetry = 50 * time.Millisecond

// An embedded memory node shares the proxy's fate: a pause stops both, and
// the table ends with the process. Declaring its only member dead after a
// pause (a stopped container, a throttled cgroup, a debugger) would throw
// away every lock with nobody to give them to, and keep the entries
// reserved for the dead member's horizon; Redis keeps its keys across a
// pause. The lease cap likewise only bounds what other members or a
// restarted memory node would wait for. Both are made longer than a
// process lives (SoloForever, the embedded memory node's DeadAfter and
// MaxLease), which switches them off without a second code path.
const (
	SoloForever    = 365 * 24 * time.Hour
	soloStaleAfter = time.Second
	// soloMargin is what the embedded memory node's horizon adds to the
	// longest TTL, so that its beats (every 100 ms) cover the next grant
	// without a push; a restart waits that much longer.
	soloMargin = 250 * time.Millisecond
)

// ErrOpenFabric is a join refused because it would run the fabric across
// the network with no secret: a setting to fix, not a state to wait out.
var ErrOpenFabric = errors.New("refusing an unauthenticated fabric across the network")

// JoinAll joins every memory node once at startup. A memory node that
// answers ErrUnavailable (in its restart grace, which lasts as long as the
// locks of its previous run may, or deposed during a failover) is asked
// again until it admits the proxy, however long that takes: starting to
// serve before would grant locks that may still be held. For a shard, an
// active memory node that cannot be reached is retried for up to a minute
// (a failover may be under way); any other error, and a fabric that would
// run across the network without a secret, ends the start.
func JoinAll(ctx context.Context, ms []*Member) error {
	for _, mb := range ms {
		deadline := time.Now().Add(time.Minute)
		var logged time.Time
		for {
			err := mb.connectWithin(ctx, 10*time.Second)
			if err == nil {
				break
			}
			grace := errors.Is(err, rdma.ErrUnavailable) && !errors.Is(err, ErrOpenFabric)
			if (!grace && (mb.Follow == nil || time.Now().After(deadline) || errors.Is(err, ErrOpenFabric))) || ctx.Err() != nil {
				return err
			}
			if time.Since(logged) >= 5*time.Second {
				logged = time.Now()
				mb.Log.Info("memory node not ready; retrying", zap.String("memnode", mb.Name), zap.Error(err))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(GraceRetry):
			}
		}
	}
	return nil
}
