// Package lockmap is the proxy's lock table: it maps Redis keys to ShiftLock
// entries on memory nodes and keeps, per key, who holds it through this proxy
// (token, mode, fencing token, TTL deadline). It expires TTLs by releasing on
// the holder's behalf, as a Redis key would expire.
package lockmap

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// Config configures a Map.
type Config struct {
	Logger *zap.Logger
	// OnAcquire, if set, is told about every acquire attempt: its mode, how
	// long it took, whether it had to queue, and whether it succeeded.
	OnAcquire func(m shiftlock.Mode, took time.Duration, queued, ok bool)
	// OnExpire, if set, is told about every TTL expiry.
	OnExpire func(key string)
	// OnHoldEnd, if set, is told how long each hold lasted when it ends:
	// released or deleted by a client, or expired by its TTL.
	OnHoldEnd func(m shiftlock.Mode, held time.Duration, expired bool)
	// Route turns on quorum routing (route.go): single-key exclusive
	// acquires with a TTL and a wait budget are taken at the key's home
	// proxy, so that a RedLock client's requests through several proxies
	// of one memory node share one lock. It costs a message round trip per
	// acquire and per release whose home is another proxy; turn it on where
	// clients use RedLock over the proxies.
	Route bool
	// RangeWait is the range locks' T_wait (rangelock.Config.Wait), which
	// must exceed a few round trips of the fabric; 0 keeps rangelock's
	// default.
	RangeWait time.Duration
}

// Map is the lock table of one proxy. It is safe for concurrent use.
type Map struct {
	doms    []atomic.Pointer[Domain] // current membership per memory node
	changed atomic.Pointer[chan struct{}]
	entries []uint64
	cfg     Config
	log     *zap.Logger
	shards  [256]shard
	exp     *expirer
	// draining: new acquires are refused (Drain).
	draining atomic.Bool
	inline   atomic.Bool // Inline

	counts entryTable // exclusive grants and releases in flight per entry

	rng ranges // range locks (ranges.go)

	routers []atomic.Pointer[router] // per memory node, with Config.Route
	rstats  RouteStats
}

type shard struct {
	mu   sync.Mutex
	keys map[string][]*hold // exclusive: one hold; shared: one per token
	// gone, when someone waits for a hold of this shard to go, is closed
	// (and cleared) by the next removal.
	gone chan struct{}
}

// New returns a Map over domains, in the order that Locate uses.
func New(doms []*Domain, cfg Config) *Map {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	m := &Map{doms: make([]atomic.Pointer[Domain], len(doms)), cfg: cfg, log: cfg.Logger}
	m.rng.ends = newDeadlines()
	for i, d := range doms {
		d.number()
		m.doms[i].Store(d)
		m.entries = append(m.entries, d.Client.Entries())
	}
	m.inline.Store(m.inlineNow())
	ch := make(chan struct{})
	m.changed.Store(&ch)
	for i := range m.shards {
		m.shards[i].keys = map[string][]*hold{}
	}
	m.exp = newExpirer(m.expire)
	for _, d := range doms {
		m.track(d)
	}
	if cfg.Route {
		m.routers = make([]atomic.Pointer[router], len(doms))
		for i, d := range doms {
			m.routers[i].Store(newRouter(m, i, d))
		}
	}
	return m
}

// track has d's lease count the holds this map schedules for expiry, so
// that its horizon falls as they are released. A lease that no map tracks
// counts every grant until its deadline; one that several maps use counts
// the holds of each.
func (m *Map) track(d *Domain) {
	if d.Lease != nil {
		d.Lease.trackHolds(m.exp.latest)
		d.Lease.trackHolds(m.rng.latest)
	}
}

// Close stops TTL expiry and routing. It does not release held locks.
func (m *Map) Close() {
	m.exp.stop()
	for i := range m.routers {
		if r := m.routers[i].Swap(nil); r != nil {
			r.stop()
		}
	}
}

func (m *Map) shard(key string) *shard { return &m.shards[m.shardIndex(key)] }

func (m *Map) shardIndex(key string) int { return int(xxhash.Sum64String(key) % uint64(len(m.shards))) }

// Where returns the memory node and entry of key.
func (m *Map) Where(key string) (*Domain, uint64) {
	d, e := Locate(key, m.entries)
	return m.doms[d].Load(), e
}

// Errors from Map operations.
var (
	ErrHeldByToken = errors.New("lockmap: key is already held by this token")
	// ErrTooManyHolders refuses a new holder of a key that has
	// MaxHoldersPerKey through this proxy already.
	ErrTooManyHolders = fmt.Errorf("lockmap: %d shared holders of this key through this proxy already, its limit", MaxHoldersPerKey)
	ErrBadTTL         = errors.New("lockmap: TTL must be positive")
	// ErrDraining refuses an acquire on a proxy that is shutting down.
	ErrDraining = errors.New("lockmap: the proxy is shutting down and grants no new locks")
)

const (
	Free State = iota
	HeldHere
	// HeldElsewhere: the key's entry is held or queued on, and not by a
	// hold of this proxy that explains it: through another proxy, or by
	// another key that shares the entry.
	HeldElsewhere
)
