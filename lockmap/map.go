// Package lockmap is the proxy's lock table: it maps Redis keys to ShiftLock
// entries on memory nodes and keeps, per key, who holds it through this proxy
// (token, mode, fencing token, TTL deadline). It expires TTLs by releasing on
// the holder's behalf, as a Redis key would expire.
package lockmap

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// Domain is one memory node as the map sees it: the ShiftLock client joined
// to it and the lease that covers grants made there.
type Domain struct {
	Name   string
	Client *shiftlock.Client
	Lease  *Lease // nil: no liveness checks (tests)

	id uint32 // tells memberships apart in exclTable; set by New and Replace
}

// domIDs numbers Domains, once each, whichever map sees them first.
var domIDs struct {
	sync.Mutex
	last uint32
}

func (d *Domain) number() {
	domIDs.Lock()
	if d.id == 0 {
		domIDs.last++
		d.id = domIDs.last
	}
	domIDs.Unlock()
}

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

	excl exclTable
	// releasing counts this proxy's releases in flight per lock entry: a
	// Lookup that finds the entry held waits for them to land, so that a
	// key whose lock is on its way out (an expiry the key's own client
	// races) does not look held through another proxy.
	releasing exclTable

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

// hold is one key held by one token.
type hold struct {
	key      string
	token    string
	dom      *Domain // the membership the hold was made under
	mode     shiftlock.Mode
	fence    uint64
	deadline time.Time // zero: no TTL
	ttl      time.Duration
	since    time.Time // when it was granted
	g        *grant    // nil for a pure shadow
	dead     bool      // released or expired; the expirer skips it
	// reaped: unlinked by a command that found its TTL over before the
	// expirer did; the expirer, which still has it scheduled, releases its
	// grant (guarded by the shard's lock).
	reaped bool
	expAt  time.Time
	expIdx int // index in the expirer's heap, -1 if not there (guarded by the expirer)
	// self backs the shard's slice for a key whose only hold this is,
	// the common case, so that recording a hold allocates no slice.
	self [1]*hold
}

// live reports whether h is in force at now. A hold with a TTL ends at the
// instant of its deadline for every command, as a Redis key does, whether or
// not the expirer has got to it yet: on a loaded process timers run late, and
// a lock that could still be extended or released after its deadline could
// be extended after another client was told it was free.
func (h *hold) live(now time.Time) bool { return h.deadline.IsZero() || now.Before(h.deadline) }

// current returns key's holds in force and unlinks those whose TTL has run
// out; s.mu is held. An unlinked hold's grant stays taken until the expirer,
// which still has the hold scheduled, releases it: if reaped is true, poke
// the expirer once the lock is dropped. The clock is read only if some hold
// has a TTL.
func (s *shard) current(key string) (hs []*hold, reaped bool) {
	hs = s.keys[key]
	var now time.Time
	for _, h := range hs {
		if h.deadline.IsZero() {
			continue
		}
		if now.IsZero() {
			now = time.Now()
		}
		if !h.live(now) {
			reaped = true
			break
		}
	}
	if !reaped {
		return hs, false
	}
	kept := hs[:0]
	for _, h := range hs {
		if h.live(now) {
			kept = append(kept, h)
			continue
		}
		h.dead, h.reaped = true, true
	}
	clear(hs[len(kept):])
	if len(kept) == 0 {
		delete(s.keys, key)
	} else {
		s.keys[key] = kept
	}
	if s.gone != nil {
		close(s.gone)
		s.gone = nil
	}
	return kept, true
}

// A shadow is a hold whose lock is held by its owner through another proxy
// (owner recognition, shiftlock/owner.go): a RedLock client asked every
// proxy for the same key and token, and this one answers as an independent
// Redis instance would. It ends with its TTL or a release. A pure shadow
// (from a try-only request) has no place in the queue at all; a pending
// one keeps the place its request took, which the lock reaches once the
// owner's other holds let go.
func (h *hold) shadow() bool { return h.g == nil || h.g.pending() }

// fwd is the hold's share of a lock its home proxy holds, if it is one.
func (h *hold) fwd() *fwdGrant {
	if h.g == nil {
		return nil
	}
	fg, _ := h.g.g.(*fwdGrant)
	return fg
}

// grant is one ShiftLock grant. Keys of one multi-key acquire that land on
// the same entry share it; it is released when the last of them is.
type grant struct {
	dom   *Domain
	di    int // the memory node's index in the map
	entry uint64
	mode  shiftlock.Mode
	g     shiftlock.Grant
	refs  int  // guarded by grantMu
	excl  bool // counted in Map.excl: it held the entry itself when granted

	// home: a lock taken here as its key's home (quorum routing).
	home *homeEntry
}

// remote reports a share of a lock another proxy holds as the key's home.
func (g *grant) remote() bool {
	_, ok := g.g.(*fwdGrant)
	return ok
}

// pending reports whether the grant's lock is held by its owner elsewhere
// and still on its way here (shiftlock.Guard.Pending).
func (g *grant) pending() bool {
	sg, ok := g.g.(*shiftlock.Guard)
	return ok && sg.Pending()
}

var grantMu sync.Mutex

// newGrant wraps a lock-entry grant with one reference, its caller's. One
// that holds the entry itself (not a pending grant) counts as this proxy's
// exclusive hold of it.
func (m *Map) newGrant(d *Domain, di int, entry uint64, mode shiftlock.Mode, g shiftlock.Grant) *grant {
	gr := &grant{dom: d, di: di, entry: entry, mode: mode, g: g, refs: 1}
	if !gr.pending() {
		gr.excl = true
		m.countExcl(gr, 1)
	}
	return gr
}

// New returns a Map over domains, in the order that Locate uses.
func New(doms []*Domain, cfg Config) *Map {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	m := &Map{doms: make([]atomic.Pointer[Domain], len(doms)), cfg: cfg, log: cfg.Logger}
	for i, d := range doms {
		d.number()
		m.doms[i].Store(d)
		m.entries = append(m.entries, d.Client.Entries())
	}
	ch := make(chan struct{})
	m.changed.Store(&ch)
	for i := range m.shards {
		m.shards[i].keys = map[string][]*hold{}
	}
	m.exp = newExpirer(m.expire)
	if cfg.Route {
		m.routers = make([]atomic.Pointer[router], len(doms))
		for i, d := range doms {
			m.routers[i].Store(newRouter(m, i, d))
		}
	}
	return m
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

// routerOf is memory node di's router, nil without routing.
func (m *Map) routerOf(di int, d *Domain) *router {
	if m.routers == nil {
		return nil
	}
	if r := m.routers[di].Load(); r != nil && r.dom == d {
		return r
	}
	return nil
}

// Domains are the current memberships of the memory nodes, in Locate order.
func (m *Map) Domains() []*Domain {
	ds := make([]*Domain, len(m.doms))
	for i := range m.doms {
		ds[i] = m.doms[i].Load()
	}
	return ds
}

// Replace installs a new membership for memory node i, after the proxy
// rejoined it (it was declared dead, or the memory node restarted and lost
// its table). Every hold made under the old membership is void: it is
// dropped and counted as lost, and acquires queued on the old membership
// retry on the new one within their wait budget. The new membership's table
// must be the same size, since keys are placed by it.
func (m *Map) Replace(i int, d *Domain) (lost int, err error) {
	if n := d.Client.Entries(); n != m.entries[i] {
		return 0, fmt.Errorf("lockmap: memory node %d now has %d entries, not %d: keys would move", i, n, m.entries[i])
	}
	d.number()
	old := m.doms[i].Swap(d)
	if m.routers != nil {
		if r := m.routers[i].Swap(newRouter(m, i, d)); r != nil {
			r.stop()
		}
	}
	var gone []*hold
	next := make(chan struct{})
	close(*m.changed.Swap(&next))
	for si := range m.shards {
		s := &m.shards[si]
		s.mu.Lock()
		for key, hs := range s.keys {
			kept := hs[:0]
			for _, h := range hs {
				if h.dom == old {
					h.dead = true
					gone = append(gone, h)
					continue
				}
				kept = append(kept, h)
			}
			if len(kept) == 0 {
				delete(s.keys, key)
			} else {
				s.keys[key] = kept
			}
		}
		if s.gone != nil && len(gone) > 0 {
			close(s.gone)
			s.gone = nil
		}
		s.mu.Unlock()
	}
	for _, h := range gone {
		m.exp.remove(h)
	}
	lost = len(gone) + m.rangeForget(old)
	m.excl.forget(old)
	if lost > 0 {
		m.log.Warn("holds lost with the old membership", zap.String("memnode", d.Name), zap.Int("lost", lost))
	}
	return lost, nil
}

// MembershipGone reports whether err means that the proxy's membership of a
// memory node is gone or being replaced: no lease, the node unreachable, the
// proxy fenced, or the old membership's endpoint or lock client already
// closed. A rejoin cures all of these, so a client should retry.
func MembershipGone(err error) bool { return membershipGone(err) }

// membershipGone reports errors that a rejoin can cure.
func membershipGone(err error) bool {
	return errors.Is(err, ErrNoLease) || errors.Is(err, rdma.ErrUnreachable) || errors.Is(err, rdma.ErrFenced) ||
		errors.Is(err, rdma.ErrClosed) || errors.Is(err, shiftlock.ErrClosed)
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
	ErrBadTTL      = errors.New("lockmap: TTL must be positive")
	// ErrDraining refuses an acquire on a proxy that is shutting down.
	ErrDraining = errors.New("lockmap: the proxy is shutting down and grants no new locks")
)

// AcquireOptions describe one acquire.
type AcquireOptions struct {
	Mode shiftlock.Mode
	// TTL after which the proxy releases on the holder's behalf; 0 = none.
	TTL time.Duration
	// Wait is how long to queue if a key is held; 0 = try once.
	Wait time.Duration
	// Reentrant: a key already held exclusively by the same token counts as
	// acquired, and its TTL is reset (bsm/redislock and redis-py semantics).
	Reentrant bool
	// Queue, if set, is called when the acquire is about to queue behind a
	// holder; the context it returns governs the wait, and stop is called
	// when the wait is over. The proxy uses it to notice a client that hangs
	// up while queued without watching every uncontended acquire.
	Queue func(ctx context.Context) (qctx context.Context, stop func())
}

// Acquire takes every key for token, all or nothing, in a global order
// (memory node, entry) so that multi-key acquires cannot deadlock. It returns
// the fencing tokens (one per key, in the order given), or ok=false if some
// key stayed held for the whole wait budget.
func (m *Map) Acquire(ctx context.Context, keys []string, token string, opt AcquireOptions) (fences []uint64, ok bool, err error) {
	fences = make([]uint64, len(keys))
	if ok, err = m.acquire(ctx, keys, token, opt, fences); !ok {
		return nil, false, err
	}
	return fences, true, nil
}

// AcquireKey is Acquire for one key, which is what SET NX and most lock
// scripts ask for; it returns the key's fencing token and allocates less.
func (m *Map) AcquireKey(ctx context.Context, key, token string, opt AcquireOptions) (fence uint64, ok bool, err error) {
	keys, fences := [1]string{key}, [1]uint64{}
	ok, err = m.acquire(ctx, keys[:], token, opt, fences[:])
	return fences[0], ok, err
}

// acquire is Acquire with the fencing tokens written to fences (one per
// key), which the caller provides.
func (m *Map) acquire(ctx context.Context, keys []string, token string, opt AcquireOptions, fences []uint64) (ok bool, err error) {
	if m.draining.Load() {
		return false, ErrDraining
	}
	if opt.Mode == 0 {
		opt.Mode = shiftlock.Exclusive
	}
	if opt.TTL < 0 {
		return false, ErrBadTTL
	}
	if isNoWait(ctx) && !m.Inline() {
		return false, ErrWouldBlock
	}
	start := time.Now()
	queued := false
	paused := false // waited for something other than the lock's queue
	defer func() {
		// An attempt refused with ErrWouldBlock runs again off the loop and
		// is told about then; reporting it here would count it twice.
		if m.cfg.OnAcquire != nil && !errors.Is(err, ErrWouldBlock) {
			m.cfg.OnAcquire(opt.Mode, time.Since(start), queued, ok)
		}
	}()

	// Reentrant refresh of keys this token already holds, and duplicate
	// checks, before touching any lock.
	// The buffers hold a single key's acquire, the common one, on the stack.
	var wbuf [1]want
	var gbuf [1]*grant
	ws := m.wants(wbuf[:0], keys)
	fresh := ws[:0]
	var refresh []*hold
	othersHere := false // another token holds a key here (a shadow)
	for _, w := range ws {
		h, others := m.holdsOf(w.key, token)
		othersHere = othersHere || others
		if h != nil {
			if opt.Reentrant && h.mode == shiftlock.Exclusive && opt.Mode == shiftlock.Exclusive {
				refresh = append(refresh, h)
				continue
			}
			if opt.Mode == shiftlock.Exclusive {
				return false, nil // Redis SET NX on an existing key: not set
			}
			return false, fmt.Errorf("%w: %q", ErrHeldByToken, w.key)
		}
		fresh = append(fresh, w)
	}

	var deadline time.Time
	if opt.Wait > 0 {
		deadline = start.Add(opt.Wait)
	}
	got := gbuf[:0]
	undo := func() {
		for _, g := range got {
			m.releaseGrant(g)
		}
	}
	// Owner tags let a single key's exclusive holder be recognised by the
	// same client asking through other proxies (RedLock over proxies that
	// share a memory node; shiftlock/owner.go).
	var tag uint64
	if len(keys) == 1 && len(fresh) == 1 && opt.Mode == shiftlock.Exclusive {
		tag = tagFor(fresh[0].dom, keys[0], token)
	}
	if tag != 0 {
		if r := m.routerOf(fresh[0].di, fresh[0].dom); r != nil && opt.TTL > 0 && !deadline.IsZero() {
			// Quorum routing: the key's home proxy takes the lock, or
			// joins this token's hold of it (route.go). Waiting there
			// involves messages, which never run on an event loop.
			if isNoWait(ctx) {
				return false, ErrWouldBlock
			}
			gr, waited, err := r.lock(ctx, fresh[0].entry, tag, deadline, opt.TTL, opt.Queue)
			queued = waited
			if err != nil || gr == nil {
				return false, err
			}
			return m.admit(ctx, keys, token, opt, deadline, tag, fresh, refresh, append(got, gr), 0, fences, time.Time{})
		}
		if othersHere {
			// Another token holds it here, as a shadow of its hold through
			// another proxy: an independent Redis instance would refuse, so
			// this proxy waits for it to go, within the budget.
			paused = true
			if deadline.IsZero() || !m.awaitOthersGone(ctx, keys[:1], token, deadline) {
				if isNoWait(ctx) && !deadline.IsZero() {
					return false, ErrWouldBlock
				}
				return false, nil
			}
		}
	}
	var shadowFence uint64
	for _, w := range fresh {
		if grantOf(got, w.di, w.entry) != nil {
			continue // another key of this acquire shares the entry
		}
		var g shiftlock.Grant
		var fence uint64
		var waited bool
		var err error
		for {
			dom := m.doms[w.di].Load()
			changed := *m.changed.Load()
			g, fence, waited, err = m.lockEntry(ctx, dom, w.entry, opt.Mode, deadline, tag, opt.Queue)
			if err == nil || !membershipGone(err) || deadline.IsZero() || !time.Now().Before(deadline) {
				break
			}
			if isNoWait(ctx) {
				err = ErrWouldBlock
				break
			}
			// The membership is gone; the proxy is rejoining. Wait for it,
			// within the budget, then try again on the new one.
			paused = true
			t := time.NewTimer(time.Until(deadline))
			select {
			case <-changed:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			if ctx.Err() != nil {
				break
			}
		}
		queued = queued || waited
		if err != nil || (g == nil && fence == 0) {
			undo()
			return false, err
		}
		if g == nil {
			shadowFence = fence
			continue
		}
		got = append(got, m.newGrant(m.doms[w.di].Load(), w.di, w.entry, opt.Mode, g))
	}

	// An acquire that did not wait was granted within a few microseconds
	// of its start; its TTL may run from there, which spares a clock read.
	var granted time.Time
	if !queued && !paused {
		granted = start
	}
	return m.admit(ctx, keys, token, opt, deadline, tag, fresh, refresh, got, shadowFence, fences, granted)
}

// admit finishes an acquire whose locks are taken (got, or a shadow's
// fence): the lease must cover the TTL, the holds are recorded (one token
// per key here, as on a Redis instance), tagged grants are vouched for,
// and TTLs are scheduled. It undoes the grants if any step fails. The
// keys' fencing tokens go to fences. TTLs run from now, the time of the
// grant (zero: read the clock).
func (m *Map) admit(ctx context.Context, keys []string, token string, opt AcquireOptions, deadline time.Time, tag uint64,
	fresh []want, refresh []*hold, got []*grant, shadowFence uint64, fences []uint64, now time.Time) (ok bool, err error) {
	undo := func() {
		for _, g := range got {
			m.releaseGrant(g)
		}
	}
	if now.IsZero() {
		now = time.Now()
	}
	var end time.Time
	if opt.TTL > 0 {
		end = now.Add(opt.TTL)
	}
	// Every memory node we hold on must have our lease cover the deadline,
	// pending grants included: their lock may arrive at any moment.
	for i, gr := range got {
		if gr.remote() || gr.dom.Lease == nil || coveredBy(got[:i], gr.dom) {
			continue // a share's lease is its home's
		}
		if err := gr.dom.Lease.Cover(ctx, end, opt.TTL); err != nil {
			undo()
			return false, err
		}
	}
	for _, h := range refresh {
		if fg := h.fwd(); fg != nil {
			if ok, err := fg.extend(ctx, opt.TTL); !ok || err != nil {
				undo()
				return false, err
			}
			continue
		}
		d, _ := m.Where(h.key)
		if d.Lease != nil {
			if err := d.Lease.Cover(ctx, end, opt.TTL); err != nil {
				undo()
				return false, err
			}
		}
	}

	// Each grant was created with one reference (dropped by undo on failure);
	// from here on, every key holding it owns one.
	var hbuf [1]*hold
	holds := hbuf[:0]
	for _, w := range fresh {
		h := &hold{key: w.key, token: token, mode: opt.Mode, deadline: end, ttl: opt.TTL, since: now, expIdx: -1}
		if gr := grantOf(got, w.di, w.entry); gr != nil {
			h.dom, h.fence, h.g = gr.dom, fenceOf(gr.g), gr
		} else {
			h.dom, h.fence = m.doms[w.di].Load(), shadowFence
		}
		holds = append(holds, h)
	}
	for !m.record(holds) {
		// Another token's shadow appeared here while we waited: an
		// independent Redis instance would not say yes to both, so the
		// grant waits for it to go (its release is usually on its way:
		// our lock came from that same client letting go elsewhere).
		if deadline.IsZero() || isNoWait(ctx) || !m.awaitOthersGone(ctx, keys, token, deadline) {
			undo()
			if isNoWait(ctx) && !deadline.IsZero() {
				return false, ErrWouldBlock
			}
			return false, nil
		}
	}
	grantMu.Lock()
	for _, h := range holds {
		if h.g != nil {
			h.g.refs++
		}
	}
	for _, gr := range got {
		gr.refs--
	}
	grantMu.Unlock()
	for _, r := range refresh {
		if !m.setDeadline(r, end, opt.TTL) {
			// Its TTL ran out meanwhile: the key is no longer this
			// token's, so the acquire as a whole did not happen.
			for _, h := range holds {
				var buf [1]*hold
				m.releaseHolds(m.remove(h.key, func(x *hold) bool { return x == h }, buf[:0]))
			}
			return false, nil
		}
	}
	// The client is about to be told: from now on other proxies may
	// recognise this holder as their client's too.
	if tag != 0 {
		for _, gr := range got {
			if sg, ok := gr.g.(*shiftlock.Guard); ok {
				sg.Vouch()
			}
		}
	}
	for i, k := range keys {
		for _, h := range refresh {
			if h.key == k {
				fences[i] = h.fence
			}
		}
		for _, h := range holds {
			if h.key == k {
				fences[i] = h.fence
			}
		}
	}
	if !end.IsZero() {
		for _, h := range holds {
			m.exp.add(h, end)
		}
	}
	return true, nil
}

// want is one key of an acquire and where it lives.
type want struct {
	key   string
	di    int
	entry uint64
	dom   *Domain
}

// wants appends keys to ws, located, without duplicates, in the global
// order (memory node, entry) that keeps multi-key acquires from
// deadlocking.
func (m *Map) wants(ws []want, keys []string) []want {
	for _, k := range keys {
		dup := false
		for _, w := range ws {
			dup = dup || w.key == k
		}
		if dup {
			continue
		}
		di, e := Locate(k, m.entries)
		ws = append(ws, want{key: k, di: di, entry: e, dom: m.doms[di].Load()})
	}
	if len(ws) > 1 {
		slices.SortFunc(ws, func(a, b want) int {
			if a.di != b.di {
				return cmp.Compare(a.di, b.di)
			}
			return cmp.Compare(a.entry, b.entry)
		})
	}
	return ws
}

// grantOf finds the grant of got on entry e of memory node di.
func grantOf(got []*grant, di int, e uint64) *grant {
	for _, gr := range got {
		if gr.di == di && gr.entry == e {
			return gr
		}
	}
	return nil
}

// coveredBy reports whether a grant of got is on d (whose lease then
// already covers the deadline).
func coveredBy(got []*grant, d *Domain) bool {
	for _, gr := range got {
		if gr.dom == d {
			return true
		}
	}
	return false
}

// record adds holds to the table, all or none: an exclusive hold is not
// added while the key has a hold of another token here. That can only be a
// shadow (the lock entry itself admits one exclusive holder): a grant that
// reached its waiter while the same proxy answered another client's
// RedLock request for the key as an instance that holds it.
func (m *Map) record(holds []*hold) bool {
	for i, h := range holds {
		s := m.shard(h.key)
		s.mu.Lock()
		conflict := false
		cur, reaped := s.current(h.key)
		if h.mode == shiftlock.Exclusive {
			for _, o := range cur {
				if o.token != h.token {
					conflict = true
				}
			}
		}
		if !conflict {
			if len(cur) > 0 {
				s.keys[h.key] = append(cur, h)
			} else {
				h.self[0] = h
				s.keys[h.key] = h.self[:]
			}
		}
		s.mu.Unlock()
		m.reaped(reaped)
		if conflict {
			for _, r := range holds[:i] {
				var buf [1]*hold
				m.remove(r.key, func(x *hold) bool { return x == r }, buf[:0])
			}
			return false
		}
	}
	return true
}

// fenceOf is the fencing token clients see: the grant's RelCnt plus one, so
// that no fence is ever 0, which applications tend to read as "no token".
func fenceOf(g shiftlock.Grant) uint64 { return g.Token() + 1 }

// lockEntry takes one entry, waiting until deadline (zero: try once). A
// request with a wait budget enqueues directly: the enqueuing atomic costs
// no more than a try when the entry is free, and a try that fails would
// only add an atomic before the enqueue. With a non-zero owner tag, the
// same key and token held through another proxy (shiftlock owner
// recognition) yields a pending grant, or for a try-only request no grant
// and the holder's fence (a pure shadow). Neither a grant nor a shadow,
// with no error, means "held for the whole budget".
func (m *Map) lockEntry(ctx context.Context, d *Domain, entry uint64, mode shiftlock.Mode, deadline time.Time, tag uint64,
	queue func(context.Context) (context.Context, func())) (shiftlock.Grant, uint64, bool, error) {
	if d.Lease != nil {
		if err := d.Lease.Valid(); err != nil {
			return nil, 0, false, err
		}
	}
	c := d.Client
	if deadline.IsZero() || isNoWait(ctx) {
		var g *shiftlock.Guard
		var ok bool
		var e shiftlock.Entry
		var err error
		if mode == shiftlock.Shared {
			g, ok, err = c.TryShared(ctx, entry)
		} else {
			g, ok, e, err = c.TryExclusiveTagged(ctx, entry, tag)
		}
		switch {
		case err != nil:
			return nil, 0, false, err
		case ok:
			return g, 0, false, nil
		case isNoWait(ctx) && (!deadline.IsZero() || tag != 0):
			return nil, 0, false, ErrWouldBlock // it would queue, or wait for an answer
		case tag != 0:
			// The holder may be the same key and token through another
			// proxy (a RedLock client asks every proxy at once): ask the
			// queue, which costs messages, not memory-node verbs.
			if tok, same := c.QueryOwner(ctx, entry, e.Tail(), tag, tagGrace); same {
				return nil, tok + 1, false, nil
			}
		}
		return nil, 0, false, nil
	}
	// The budget only governs a wait, so its deadline (and the caller's
	// watch for a client that hangs up) is set up only if the acquire has
	// to wait: an uncontended one allocates neither.
	wctx := m.waitContext(ctx, deadline, queue)
	var g *shiftlock.Guard
	var err error
	if mode == shiftlock.Shared {
		g, err = c.AcquireShared(wctx, entry)
	} else {
		g, err = c.AcquireExclusiveTagged(wctx, entry, tag)
	}
	if err == nil {
		return g, 0, g.Waited(), nil
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return nil, 0, true, nil // budget spent: "not acquired", not an error
	}
	return nil, 0, true, err
}

// MinOwnerToken is the shortest token owner recognition accepts: RedLock
// clients use random values of 16 bytes or more (redsync 24 characters,
// node-redlock 32, RedLock.net and redlock-rb 36), while a constant such
// as "1" or "locked" is what two unrelated applications may both use.
const MinOwnerToken = 16

// tagFor is the owner tag of an exclusive single-key acquire of key by
// token through d, or 0 when the holder must not be recognised through
// other proxies: recognition is off, or the token is too short to tell
// one client from another.
func tagFor(d *Domain, key, token string) uint64 {
	if !d.Client.OwnerTags() || len(token) < MinOwnerToken {
		return 0
	}
	return ownerTag(key, token)
}

// ownerTag identifies a key and token for owner recognition: a hash of
// both, never 0 (which means "no tag").
func ownerTag(key, token string) uint64 {
	h := xxhash.New()
	_, _ = h.WriteString(key)
	_, _ = h.Write([]byte{0})
	_, _ = h.WriteString(token)
	if t := h.Sum64(); t != 0 {
		return t
	}
	return 1
}

// tagGrace bounds how long a try-only acquire waits for the queue's answer
// about its owner tag (shiftlock.Client.QueryOwner). The answer is a
// message round trip between proxies, or, when the same client's request
// through another proxy was granted a moment ago and not yet answered, that
// answer's time; a queue without the tag answers no at once. Every
// question is answered, so the bound only matters for a proxy that died
// holding one: a shorter one made the answer a race that a loaded host
// lost (issue 33 item 3: SET NX PX through 8 proxies refused after 8-18 ms
// with a 2 ms grace, although the same client held the key).
var tagGrace = shiftlock.OwnerAnswerCap // a variable for tests only

// heldByOther reports whether key has a hold of another token here.
func (m *Map) heldByOther(key, token string) bool {
	s := m.shard(key)
	s.mu.Lock()
	hs, reaped := s.current(key)
	other := false
	for _, h := range hs {
		other = other || h.token != token
	}
	s.mu.Unlock()
	m.reaped(reaped)
	return other
}

// awaitOthersGone waits until no key has a hold of another token here, or
// until deadline. Such holds are shadows whose client is letting go; the
// wait ends as soon as one goes (the shard's removals signal it), so that a
// RedLock client's request is queued right after its requests to the other
// proxies, where they recognise each other.
func (m *Map) awaitOthersGone(ctx context.Context, keys []string, token string, deadline time.Time) bool {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		var wake <-chan struct{}
		for _, k := range keys {
			if ch := m.otherHoldSignal(k, token); ch != nil {
				wake = ch
				break
			}
		}
		if wake == nil {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return false
		}
		if t == nil {
			t = time.NewTimer(left)
		}
		select {
		case <-wake:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// otherHoldSignal returns, if key has a hold of another token here, a
// channel that is closed when a hold of key's shard goes; nil otherwise.
func (m *Map) otherHoldSignal(key, token string) <-chan struct{} {
	s := m.shard(key)
	s.mu.Lock()
	hs, reaped := s.current(key)
	var ch chan struct{}
	for _, h := range hs {
		if h.token != token {
			if s.gone == nil {
				s.gone = make(chan struct{})
			}
			ch = s.gone
			break
		}
	}
	s.mu.Unlock()
	m.reaped(reaped)
	return ch
}

// holdsOf returns token's hold of key, if any, and whether another token
// holds key here too: one visit to the shard for what every acquire asks.
func (m *Map) holdsOf(key, token string) (mine *hold, others bool) {
	s := m.shard(key)
	s.mu.Lock()
	hs, reaped := s.current(key)
	for _, h := range hs {
		if h.token == token {
			mine = h
		} else {
			others = true
		}
	}
	s.mu.Unlock()
	m.reaped(reaped)
	return mine, others
}

func (m *Map) find(key, token string) *hold {
	mine, _ := m.holdsOf(key, token)
	return mine
}

// setDeadline gives h a new deadline (zero: none), if h is still in force
// now: a hold whose TTL ran out while the caller was deciding stays gone.
func (m *Map) setDeadline(h *hold, end time.Time, ttl time.Duration) bool {
	s := m.shard(h.key)
	s.mu.Lock()
	_, reaped := s.current(h.key)
	if h.dead {
		s.mu.Unlock()
		m.reaped(reaped)
		return false
	}
	h.deadline, h.ttl = end, ttl
	s.mu.Unlock()
	m.reaped(reaped)
	if !end.IsZero() {
		m.exp.add(h, end)
	}
	return true
}

// reaped wakes the expirer to release the grants of holds that a command
// found past their TTL (shard.current), if it found any.
func (m *Map) reaped(any bool) {
	if any {
		m.exp.poke()
	}
}

// remove unlinks holds of key that match and appends them to out; the
// caller releases their grants outside the shard lock. Holds past their TTL
// never match: they are gone already, and the expirer releases them.
func (m *Map) remove(key string, match func(*hold) bool, out []*hold) []*hold {
	s := m.shard(key)
	s.mu.Lock()
	n := len(out)
	hs, reaped := s.current(key)
	kept := hs[:0]
	for _, h := range hs {
		if match(h) {
			h.dead = true
			out = append(out, h)
		} else {
			kept = append(kept, h)
		}
	}
	clear(hs[len(kept):])
	if len(kept) == 0 {
		delete(s.keys, key)
	} else {
		s.keys[key] = kept
	}
	if s.gone != nil && len(out) > n {
		close(s.gone)
		s.gone = nil
	}
	s.mu.Unlock()
	m.reaped(reaped)
	for _, h := range out[n:] {
		m.exp.remove(h)
	}
	return out
}

func (m *Map) releaseGrant(g *grant) {
	if m.lastRef(g) {
		m.releaseLast(g)
	}
}

// lastRef drops one reference to g and reports whether it was the last;
// the grant then no longer counts as this proxy's exclusive hold of its
// entry, and counts as a release in flight until the caller's release of it
// has landed (released).
func (m *Map) lastRef(g *grant) bool {
	grantMu.Lock()
	g.refs--
	last := g.refs <= 0
	grantMu.Unlock()
	if last {
		m.releasing.add(g.dom, g.entry, 1)
		if g.excl {
			m.countExcl(g, -1)
		}
	}
	if last && g.home != nil {
		g.home.r.forget(g.home)
	}
	return last
}

// released ends the in-flight count lastRef started for g.
func (m *Map) released(g *grant) { m.releasing.add(g.dom, g.entry, -1) }

func (m *Map) releaseLast(g *grant) {
	if err := g.g.Release(context.Background()); err != nil {
		m.log.Warn("release failed", zap.String("memnode", g.dom.Name), zap.Uint64("entry", g.entry), zap.Error(err))
	}
	m.released(g)
}

func (m *Map) releaseHolds(hs []*hold) {
	for _, h := range hs {
		if h.g != nil { // a pending grant too: its place in the queue must be passed on
			m.releaseGrant(h.g)
		}
	}
}

// Release releases key if token holds it, and reports whether it did.
func (m *Map) Release(key, token string) bool {
	var buf [1]*hold
	hs := m.remove(key, func(h *hold) bool { return h.token == token }, buf[:0])
	m.releaseHolds(hs)
	m.ended(hs, false)
	return len(hs) > 0
}

// Delete releases key whoever holds it through this proxy (Redis DEL). It
// reports how many holds it released.
func (m *Map) Delete(key string) int {
	hs := m.remove(key, func(*hold) bool { return true }, nil)
	m.releaseHolds(hs)
	m.ended(hs, false)
	return len(hs)
}

// Extend sets the TTL of key's hold by token, and only token's: an empty
// token is a token like any other (SET k "" NX takes one), never a
// wildcard. A non-positive TTL deletes, as PEXPIRE does in Redis.
func (m *Map) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	return m.extend(ctx, key, token, false, ttl)
}

// ExtendAny is Extend for every holder of key, whatever its token: Redis's
// PEXPIRE, which names no token.
func (m *Map) ExtendAny(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	return m.extend(ctx, key, "", true, ttl)
}

func (m *Map) extend(ctx context.Context, key, token string, anyHolder bool, ttl time.Duration) (bool, error) {
	if ttl <= 0 {
		if d := doorbellOf(ctx); d != nil {
			if anyHolder {
				return m.DeleteAsync(d, key) > 0, nil
			}
			return m.ReleaseAsync(d, key, token), nil
		}
		if isNoWait(ctx) && !m.Inline() {
			return false, ErrWouldBlock
		}
		if anyHolder {
			return m.Delete(key) > 0, nil
		}
		return m.Release(key, token), nil
	}
	s := m.shard(key)
	s.mu.Lock()
	cur, reaped := s.current(key)
	var hs []*hold
	for _, h := range cur {
		if anyHolder || h.token == token {
			hs = append(hs, h)
		}
	}
	s.mu.Unlock()
	m.reaped(reaped)
	if len(hs) == 0 {
		return false, nil
	}
	end := time.Now().Add(ttl)
	// A share of a lock held by the key's home (quorum routing): the home
	// runs its TTL, and says whether it still has it.
	local := hs[:0:0]
	extended := 0
	for _, h := range hs {
		fg := h.fwd()
		if fg == nil {
			local = append(local, h)
			continue
		}
		if isNoWait(ctx) {
			return false, ErrWouldBlock
		}
		ok, err := fg.extend(ctx, ttl)
		if err != nil {
			return false, err
		}
		if !ok {
			m.Release(key, h.token) // the home let it go: so does this instance
			continue
		}
		if m.setDeadline(h, end, ttl) {
			extended++
		}
	}
	if len(local) == 0 {
		return extended > 0, nil
	}
	hs = local
	d, _ := m.Where(key)
	if d.Lease != nil {
		if isNoWait(ctx) && !d.Lease.Covers(end, ttl) {
			return false, ErrWouldBlock // a heartbeat push first
		}
		if err := d.Lease.Cover(ctx, end, ttl); err != nil {
			return false, err
		}
	}
	// A hold whose TTL ran out while the lease was being extended stays
	// gone: Redis would have answered 0 had the command come that late.
	done := extended > 0
	for _, h := range hs {
		if m.setDeadline(h, end, ttl) {
			done = true
		}
	}
	return done, nil
}

// Reassign gives the holds of keys, held here by the tokens from (one per
// key), to token to, with TTL ttl, without letting go of any lock: Redis's
// SET of a new value over a key that has one, which bsm/redislock's obtain
// does when its caller re-obtains its own lock with new metadata. Letting go
// and taking the lock again would leave a moment in which someone else may
// take it, and a try that then fails would leave the caller with nothing.
//
// It is all or nothing, and the answer is false, with nothing changed, if a
// key is no longer held here by its from token, or if its hold cannot change
// hands in place. Only an exclusive hold whose grant is its own, on the
// current membership, can: a shadow's lock is held by its owner through
// another proxy under the old token, a routed share's by the key's home,
// which knows the owner by the old token's tag, and a shared hold shares its
// lock with other tokens. A key listed twice is held once, by one token, so
// it can only be listed with the same from token.
func (m *Map) Reassign(ctx context.Context, keys, from []string, to string, ttl time.Duration) (bool, error) {
	if len(keys) != len(from) {
		return false, fmt.Errorf("lockmap: Reassign: %d keys but %d tokens", len(keys), len(from))
	}
	if ttl <= 0 {
		return false, ErrBadTTL
	}
	if ok, _ := m.reassign(keys, from, "", 0, time.Time{}); !ok {
		return false, nil // checked first: a lease push for a refusal is wasted
	}
	end := time.Now().Add(ttl)
	var covered []*Domain
	for _, k := range keys {
		d, _ := m.Where(k)
		if d.Lease == nil || slices.Contains(covered, d) {
			continue
		}
		covered = append(covered, d)
		if isNoWait(ctx) && !d.Lease.Covers(end, ttl) {
			return false, ErrWouldBlock // a heartbeat push first
		}
		if err := d.Lease.Cover(ctx, end, ttl); err != nil {
			return false, err
		}
	}
	ok, hs := m.reassign(keys, from, to, ttl, end)
	for _, h := range hs {
		m.exp.add(h, end)
	}
	return ok, nil
}

// reassign checks, under the shard locks of every key at once, that each
// key's hold can change hands in place (Reassign); with a zero end it only
// checks, otherwise it hands them over and returns the holds, whose new
// deadline the caller schedules.
func (m *Map) reassign(keys, from []string, to string, ttl time.Duration, end time.Time) (bool, []*hold) {
	// Shards are locked in index order, so that two calls over the same
	// shards cannot deadlock.
	idx := make([]int, 0, len(keys))
	for _, k := range keys {
		idx = append(idx, m.shardIndex(k))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		m.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range idx {
			m.shards[i].mu.Unlock()
		}
	}()
	hs := make([]*hold, len(keys))
	reaped := false
	defer func() { m.reaped(reaped) }()
	for i, k := range keys {
		held, r := m.shards[m.shardIndex(k)].current(k)
		reaped = reaped || r
		if len(held) != 1 || held[0].token != from[i] || !m.ownsOutright(k, held[0]) {
			return false, nil
		}
		hs[i] = held[0]
	}
	if end.IsZero() {
		return true, nil
	}
	for i, h := range hs {
		if h.token == to && h.deadline.Equal(end) {
			continue // listed twice
		}
		h.token, h.deadline, h.ttl = to, end, ttl
		// Owner recognition must know the owner by its new token: a
		// request under the old one, through another proxy, is no
		// longer this holder's (a single-key grant carries the tag).
		if sg, ok := h.g.g.(*shiftlock.Guard); ok {
			sg.Retag(tagFor(h.dom, keys[i], to))
		}
	}
	return true, hs
}

// ownsOutright reports whether h, key's hold, holds its lock itself and
// alone, under the current membership (Reassign).
func (m *Map) ownsOutright(key string, h *hold) bool {
	if h.dead || h.mode != shiftlock.Exclusive || h.g == nil || h.g.pending() || h.g.remote() || h.g.home != nil {
		return false
	}
	d, _ := m.Where(key)
	return h.dom == d
}

// Persist removes key's TTL (Redis PERSIST).
func (m *Map) Persist(key string) bool {
	s := m.shard(key)
	s.mu.Lock()
	var cleared []*hold
	cur, reaped := s.current(key)
	for _, h := range cur {
		// A routed share keeps its TTL: its home would let the lock go
		// at the TTL anyway, and a share without one would keep it held
		// for good should this proxy die.
		if !h.deadline.IsZero() && h.fwd() == nil {
			h.deadline, h.ttl = time.Time{}, 0
			cleared = append(cleared, h)
		}
	}
	s.mu.Unlock()
	m.reaped(reaped)
	for _, h := range cleared {
		m.exp.remove(h)
	}
	return len(cleared) > 0
}

// State says where a key is held.
type State uint8

const (
	Free State = iota
	HeldHere
	// HeldElsewhere: the key's entry is held or queued on, and not by a
	// hold of this proxy that explains it: through another proxy, or by
	// another key that shares the entry.
	HeldElsewhere
)

func (s State) String() string {
	return [...]string{"free", "held", "held-elsewhere"}[s]
}

// Holder describes one hold of a key through this proxy.
type Holder struct {
	Token  string
	Mode   shiftlock.Mode
	Fence  uint64
	TTL    time.Duration // remaining, > 0; 0 = no TTL
	Shadow bool          // the lock itself is held through another proxy
}

// Info is what the proxy knows about a key.
type Info struct {
	Key     string
	State   State
	Holders []Holder
	Domain  string
	Entry   uint64
	Lock    shiftlock.Entry // the entry as read now (only read when not held here)
	Lost    error           // the lease covering this key's memory node is gone
}

// Lookup reports key's holders here, and reads the entry when there are
// none, so that a key held through another proxy is not reported free.
func (m *Map) Lookup(ctx context.Context, key string) (Info, error) {
	d, e := m.Where(key)
	info := Info{Key: key, Domain: d.Name, Entry: e}
	if d.Lease != nil {
		info.Lost = d.Lease.Valid()
	}
	now := time.Now()
	s := m.shard(key)
	s.mu.Lock()
	cur, reaped := s.current(key)
	for _, h := range cur {
		var ttl time.Duration
		if !h.deadline.IsZero() {
			// current read the clock no earlier than now, so h is in
			// force at now, and ttl > 0 stays apart from "no TTL".
			ttl = max(h.deadline.Sub(now), 1)
		}
		info.Holders = append(info.Holders, Holder{Token: h.token, Mode: h.mode, Fence: h.fence, TTL: ttl, Shadow: h.shadow()})
	}
	s.mu.Unlock()
	m.reaped(reaped)
	if len(info.Holders) > 0 {
		info.State = HeldHere
		return info, nil
	}
	if m.heldExclusivelyHere(d, e) && !m.heldForOthers(d, e) {
		return info, nil // another key of ours owns the entry: this one is free
	}
	if isNoWait(ctx) && !rdma.IsInline(d.Client.Endpoint()) {
		return info, ErrWouldBlock
	}
	ent, err := d.Client.Read(ctx, e)
	passing := func() bool { return d.Client.Abandoning(e) || m.releasing.held(d, e) }
	if err == nil && !ent.Free() && passing() && isNoWait(ctx) {
		return info, ErrWouldBlock
	}
	// A wait of ours that its client gave up, or a release of ours, may hold
	// the entry for a moment while it passes the lock on: that is nobody's
	// hold, so let it settle (briefly: it may also be queued behind a real
	// holder, or hand the lock to one).
	for settle := time.Now().Add(abandonSettle); err == nil && !ent.Free() && passing() && time.Now().Before(settle); {
		time.Sleep(100 * time.Microsecond)
		ent, err = d.Client.Read(ctx, e)
	}
	if err != nil {
		return info, err
	}
	info.Lock = ent
	if !ent.Free() {
		info.State = HeldElsewhere
	}
	return info, nil
}

// abandonSettle bounds how long Lookup waits for an abandoned wait of this
// proxy to pass on an entry that looks held.
const abandonSettle = 50 * time.Millisecond

func (m *Map) countExcl(g *grant, d int32) {
	if g.mode == shiftlock.Exclusive {
		m.excl.add(g.dom, g.entry, d)
	}
}

// heldForOthers reports whether this proxy holds entry e of d as a key's
// home for other proxies' shares (quorum routing): held, but not by a hold
// of its own.
func (m *Map) heldForOthers(d *Domain, e uint64) bool {
	for i := range m.routers {
		if r := m.routers[i].Load(); r != nil && r.dom == d {
			return r.sharedOut(e)
		}
	}
	return false
}

// heldExclusivelyHere reports whether some key of this proxy holds entry e of
// d exclusively; then nobody else can hold any key on it.
func (m *Map) heldExclusivelyHere(d *Domain, e uint64) bool { return m.excl.held(d, e) }

// exclTable counts this proxy's exclusive grants per lock entry of a
// membership, to tell "held by another key of ours on the same entry" from
// "held elsewhere". Every uncontended acquire and release counts, so it is
// sharded by entry and keyed by one integer. The zero value is empty.
type exclTable struct {
	shards [16]exclShard
}

type exclShard struct {
	mu sync.Mutex
	n  map[uint64]int32
}

// exclKey packs a membership and an entry; entries stay below 2^40.
func exclKey(d *Domain, e uint64) uint64 { return uint64(d.id)<<40 | e }

func (t *exclTable) add(d *Domain, e uint64, delta int32) {
	s, k := &t.shards[e%uint64(len(t.shards))], exclKey(d, e)
	s.mu.Lock()
	if s.n == nil {
		s.n = map[uint64]int32{}
	}
	if v := s.n[k] + delta; v > 0 {
		s.n[k] = v
	} else {
		delete(s.n, k)
	}
	s.mu.Unlock()
}

func (t *exclTable) held(d *Domain, e uint64) bool {
	s := &t.shards[e%uint64(len(t.shards))]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[exclKey(d, e)] > 0
}

// forget drops membership d's counts (it is gone: Replace).
func (t *exclTable) forget(d *Domain) {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for k := range s.n {
			if uint32(k>>40) == d.id {
				delete(s.n, k)
			}
		}
		s.mu.Unlock()
	}
}

// expire is the expirer's callback: release h if its deadline still stands,
// whether h is still in the table or a command found it expired first and
// unlinked it (shard.current).
func (m *Map) expire(h *hold, _ time.Time) {
	s := m.shard(h.key)
	s.mu.Lock()
	s.current(h.key) // unlinks h if its deadline (at, unless it moved) has passed
	mine := h.reaped
	h.reaped = false
	s.mu.Unlock()
	if !mine {
		return
	}
	// A hold of a membership that is gone (Replace) has nothing to release.
	if h.g != nil && h.g.dom == m.doms[h.g.di].Load() {
		m.releaseGrant(h.g)
	}
	m.ended([]*hold{h}, true)
	if m.cfg.OnExpire != nil {
		m.cfg.OnExpire(h.key)
	}
}

// ended reports holds that just ended to OnHoldEnd.
func (m *Map) ended(hs []*hold, expired bool) {
	if m.cfg.OnHoldEnd == nil || len(hs) == 0 {
		return
	}
	for _, h := range hs {
		m.cfg.OnHoldEnd(h.mode, time.Since(h.since), expired) // the monotonic clock alone
	}
}

// Drain refuses every acquire from now on (ErrDraining), so that the holds
// already granted can only go: released, expired, deleted. Acquires already
// queued go on. A proxy shutting down drains, then waits for Count to reach
// 0 before it leaves its memory nodes.
func (m *Map) Drain() { m.draining.Store(true) }

// Count is the number of keys held through this proxy.
func (m *Map) Count() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.keys)
		s.mu.Unlock()
	}
	return n
}
