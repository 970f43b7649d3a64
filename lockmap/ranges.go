package lockmap

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rangelock"
	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// RangeDepth is the depth of every range-lock tree: 64 × 4^8 = 4,194,304
// units, 87,381 nodes, 1.4 MB per tree. A memory node that serves range
// locks sizes RegionRanges in whole trees of this depth; every proxy and
// memory node must agree on it.
const RangeDepth = 8

// RangeTreeBytes is the size of one range tree in RegionRanges.
func RangeTreeBytes() uint64 {
	t, _ := rangelock.NewTree(rdma.Addr{}, RangeDepth)
	return t.Bytes()
}

// ErrNoRanges: the memory node has no range trees, or range locks cannot be
// served safely on it.
var ErrNoRanges = errors.New("lockmap: range locks are not available")

// rangeHold is one span held through this proxy.
type rangeHold struct {
	key, token string
	held       *rangelock.Held
	ttl        time.Duration
	deadline   time.Time
	timer      *time.Timer
}

// ranges are the proxy's range locks (LOCK.RANGE.*).
type ranges struct {
	mu    sync.Mutex
	holds map[string][]*rangeHold // by key
}

// RangeHolder describes one span held through this proxy.
type RangeHolder struct {
	Token  string
	L, R   uint64
	Mode   rangelock.Mode
	Fence  uint64
	TTLms  int64 // -1: no TTL
	Domain string
}

// RangeInfo describes a range-lock name.
type RangeInfo struct {
	Key     string
	Domain  string
	Tree    uint64 // its tree on the memory node
	Units   uint64 // spans must lie in [0, Units)
	Holders []RangeHolder
}

// rangeTree finds key's tree: the memory node Locate picks, and one of its
// trees by the key's hash. Names that share a tree exclude each other's
// overlapping spans (a false conflict, never a false grant).
func (m *Map) rangeTree(key string) (*Domain, rangelock.Tree, uint64, error) {
	di, _ := Locate(key, m.entries)
	d := m.doms[di].Load()
	ep := d.Client.Endpoint()
	// A holder that dies leaves its span locked (CITRON's recovery,
	// §3.10, is not built): only an in-process memory node, which dies
	// with its only proxy, can serve range locks safely.
	if !rdma.IsInline(ep) {
		return nil, rangelock.Tree{}, 0, fmt.Errorf("%w: they need the embedded memory node (recovery from a dead holder is not built)", ErrNoRanges)
	}
	var size uint64
	for _, r := range ep.Layout().Regions {
		if r.ID == rdma.RegionRanges {
			size = r.Size
		}
	}
	trees := size / RangeTreeBytes()
	if trees == 0 {
		return nil, rangelock.Tree{}, 0, fmt.Errorf("%w: memory node %s has no range trees", ErrNoRanges, d.Name)
	}
	slot := (xxhash.Sum64String(key) >> 8) % trees
	t, err := rangelock.NewTree(rdma.Addr{Region: rdma.RegionRanges, Offset: slot * RangeTreeBytes()}, RangeDepth)
	return d, t, slot, err
}

// RangeAcquire locks [l, r) of key in mode for token, waiting up to wait.
// It answers the grant's fencing token, or ok = false if the span stayed
// taken for the whole wait. A TTL (0: none) releases the span when it runs
// out, as a Redis key expires. Under NoWait it answers ErrWouldBlock.
func (m *Map) RangeAcquire(ctx context.Context, key, token string, l, r uint64, mode rangelock.Mode, ttl, wait time.Duration) (fence uint64, ok bool, err error) {
	d, tree, _, err := m.rangeTree(key)
	if err != nil {
		return 0, false, err
	}
	if isNoWait(ctx) {
		return 0, false, ErrWouldBlock
	}
	if l >= r || r > tree.Units() {
		return 0, false, fmt.Errorf("%w: [%d, %d) is empty or leaves [0, %d)", rangelock.ErrOutOfRange, l, r, tree.Units())
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	held, err := rangelock.New(d.Client.Endpoint(), tree, rangelock.Config{FastPath: true}).Acquire(wctx, l, r, mode)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return 0, false, nil
		}
		return 0, false, err
	}
	h := &rangeHold{key: key, token: token, held: held, ttl: ttl}
	m.rng.mu.Lock()
	if m.rng.holds == nil {
		m.rng.holds = map[string][]*rangeHold{}
	}
	m.rng.holds[key] = append(m.rng.holds[key], h)
	if ttl > 0 {
		h.deadline = time.Now().Add(ttl)
		h.timer = time.AfterFunc(ttl, func() { m.rangeDrop(h) })
	}
	m.rng.mu.Unlock()
	return held.Token(), true, nil
}

// RangeRelease releases token's hold of exactly [l, r) on key, and reports
// whether there was one.
func (m *Map) RangeRelease(key, token string, l, r uint64) bool {
	m.rng.mu.Lock()
	var found *rangeHold
	for _, h := range m.rng.holds[key] {
		if hl, hr := h.held.Span(); h.token == token && hl == l && hr == r {
			found = h
			break
		}
	}
	m.rng.mu.Unlock()
	if found == nil {
		return false
	}
	// A span past its TTL is gone already, whatever its timer is doing:
	// let it go, and answer as for a span nobody holds.
	live := found.live(time.Now())
	return m.rangeDrop(found) && live
}

// live reports whether h is in force at now: a span with a TTL ends at the
// instant of its deadline, as point locks do (hold.live).
func (h *rangeHold) live(now time.Time) bool { return h.ttl <= 0 || now.Before(h.deadline) }

// rangeDrop forgets h and unlocks its span, once: a release and the TTL's
// expiry may race, and only the first one unlocks.
func (m *Map) rangeDrop(h *rangeHold) bool {
	m.rng.mu.Lock()
	hs := m.rng.holds[h.key]
	i := -1
	for j, x := range hs {
		if x == h {
			i = j
		}
	}
	if i < 0 {
		m.rng.mu.Unlock()
		return false
	}
	hs = append(hs[:i:i], hs[i+1:]...)
	if len(hs) == 0 {
		delete(m.rng.holds, h.key)
	} else {
		m.rng.holds[h.key] = hs
	}
	if h.timer != nil {
		h.timer.Stop()
	}
	m.rng.mu.Unlock()
	if err := h.held.Release(context.Background()); err != nil {
		m.log.Warn("range release failed", zap.String("key", h.key), zap.Error(err))
	}
	return true
}

// RangeLookup describes key's range lock and the spans held here.
func (m *Map) RangeLookup(key string) (RangeInfo, error) {
	d, tree, slot, err := m.rangeTree(key)
	if err != nil {
		return RangeInfo{}, err
	}
	in := RangeInfo{Key: key, Domain: d.Name, Tree: slot, Units: tree.Units()}
	m.rng.mu.Lock()
	now := time.Now()
	for _, h := range m.rng.holds[key] {
		if !h.live(now) {
			continue // its timer drops it
		}
		l, r := h.held.Span()
		ttl := int64(-1)
		if h.ttl > 0 {
			ttl = h.deadline.Sub(now).Milliseconds()
		}
		in.Holders = append(in.Holders, RangeHolder{Token: h.token, L: l, R: r, Mode: h.held.Mode(), Fence: h.held.Token(), TTLms: ttl, Domain: d.Name})
	}
	m.rng.mu.Unlock()
	sort.Slice(in.Holders, func(i, j int) bool { return in.Holders[i].L < in.Holders[j].L })
	return in, nil
}
