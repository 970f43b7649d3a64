// Package lockmap is the proxy's lock table: it maps Redis keys to ShiftLock
// entries on memory nodes and keeps, per key, who holds it through this proxy
// (token, mode, fencing token, TTL deadline). It expires TTLs by releasing on
// the holder's behalf, as a Redis key would expire.
package lockmap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
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
}

// Config configures a Map.
type Config struct {
	Logger *zap.Logger
	// OnAcquire, if set, is told about every acquire attempt: its mode, how
	// long it took, whether it had to queue, and whether it succeeded.
	OnAcquire func(m shiftlock.Mode, took time.Duration, queued, ok bool)
	// OnExpire, if set, is told about every TTL expiry.
	OnExpire func(key string)
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

	// excl counts this proxy's exclusive grants per entry, to tell "held by
	// another key of ours on the same entry" from "held elsewhere".
	exclMu sync.Mutex
	excl   map[entryKey]int
}

type entryKey struct {
	dom   *Domain
	entry uint64
}

type shard struct {
	mu   sync.Mutex
	keys map[string][]*hold // exclusive: one hold; shared: one per token
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
	g        *grant // nil for a shadow
	dead     bool   // released or expired; the expirer skips it
}

// A shadow is a hold without a grant of its own: the same key and token are
// already held through another proxy (its owner tag says so), and this proxy
// answers as an independent Redis instance would when a RedLock client asks
// every instance in turn. It ends with its TTL or a release; it never
// touches the lock entry.
func (h *hold) shadow() bool { return h.g == nil }

// grant is one ShiftLock grant. Keys of one multi-key acquire that land on
// the same entry share it; it is released when the last of them is.
type grant struct {
	dom       *Domain
	entry     uint64
	mode      shiftlock.Mode
	g         shiftlock.Grant
	refs      int           // guarded by grantMu
	confirmed chan struct{} // closed when the owner tag confirmation is done (nil: none)
}

var grantMu sync.Mutex

// New returns a Map over domains, in the order that Locate uses.
func New(doms []*Domain, cfg Config) *Map {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	m := &Map{doms: make([]atomic.Pointer[Domain], len(doms)), cfg: cfg, log: cfg.Logger, excl: map[entryKey]int{}}
	for i, d := range doms {
		m.doms[i].Store(d)
		m.entries = append(m.entries, d.Client.Entries())
	}
	ch := make(chan struct{})
	m.changed.Store(&ch)
	for i := range m.shards {
		m.shards[i].keys = map[string][]*hold{}
	}
	m.exp = newExpirer(m.expire)
	return m
}

// Close stops TTL expiry. It does not release held locks.
func (m *Map) Close() { m.exp.stop() }

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
	old := m.doms[i].Swap(d)
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
					lost++
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
		s.mu.Unlock()
	}
	m.exclMu.Lock()
	for k := range m.excl {
		if k.dom == old {
			delete(m.excl, k)
		}
	}
	m.exclMu.Unlock()
	if lost > 0 {
		m.log.Warn("holds lost with the old membership", zap.String("memnode", d.Name), zap.Int("lost", lost))
	}
	return lost, nil
}

// membershipGone reports errors that a rejoin can cure.
func membershipGone(err error) bool {
	return errors.Is(err, ErrNoLease) || errors.Is(err, rdma.ErrUnreachable) || errors.Is(err, rdma.ErrFenced) ||
		errors.Is(err, rdma.ErrClosed) || errors.Is(err, shiftlock.ErrClosed)
}

func (m *Map) shard(key string) *shard { return &m.shards[xxhash.Sum64String(key)%256] }

// Where returns the memory node and entry of key.
func (m *Map) Where(key string) (*Domain, uint64) {
	d, e := Locate(key, m.entries)
	return m.doms[d].Load(), e
}

// Errors from Map operations.
var (
	ErrHeldByToken = errors.New("lockmap: key is already held by this token")
	ErrBadTTL      = errors.New("lockmap: TTL must be positive")
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
	if opt.Mode == 0 {
		opt.Mode = shiftlock.Exclusive
	}
	if opt.TTL < 0 {
		return nil, false, ErrBadTTL
	}
	if isNoWait(ctx) && !m.Inline() {
		return nil, false, ErrWouldBlock
	}
	start := time.Now()
	queued := false
	defer func() {
		if m.cfg.OnAcquire != nil {
			m.cfg.OnAcquire(opt.Mode, time.Since(start), queued, ok)
		}
	}()

	type want struct {
		key   string
		dom   *Domain
		di    int
		entry uint64
		pos   int
	}
	wants := make([]want, 0, len(keys))
	seen := map[string]bool{}
	for i, k := range keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		di, e := Locate(k, m.entries)
		wants = append(wants, want{key: k, dom: m.doms[di].Load(), di: di, entry: e, pos: i})
	}
	sort.Slice(wants, func(a, b int) bool {
		if wants[a].di != wants[b].di {
			return wants[a].di < wants[b].di
		}
		return wants[a].entry < wants[b].entry
	})

	// Reentrant refresh of keys this token already holds, and duplicate
	// checks, before touching any lock.
	fresh := wants[:0:0]
	refresh := []*hold{}
	for _, w := range wants {
		if h := m.find(w.key, token); h != nil {
			if opt.Reentrant && h.mode == shiftlock.Exclusive && opt.Mode == shiftlock.Exclusive {
				refresh = append(refresh, h)
				continue
			}
			if opt.Mode == shiftlock.Exclusive {
				return nil, false, nil // Redis SET NX on an existing key: not set
			}
			return nil, false, fmt.Errorf("%w: %q", ErrHeldByToken, w.key)
		}
		fresh = append(fresh, w)
	}

	var deadline time.Time
	if opt.Wait > 0 {
		deadline = start.Add(opt.Wait)
	}
	var got []*grant
	undo := func() {
		for _, g := range got {
			m.releaseGrant(g)
		}
	}
	// Owner tags identify a single key's exclusive holder across proxies.
	var tag uint64
	if len(keys) == 1 && len(fresh) == 1 && opt.Mode == shiftlock.Exclusive && fresh[0].dom.Client.OwnerTags() {
		tag = ownerTag(keys[0], token)
		if m.heldAsShadow(keys[0]) {
			// Another token holds it through another proxy and through us,
			// as on independent Redis instances: SET NX fails here at once.
			return nil, false, nil
		}
	}
	byEntry := map[[2]uint64]*grant{}
	var shadowFence uint64
	for _, w := range fresh {
		k := [2]uint64{uint64(w.di), w.entry}
		if byEntry[k] != nil {
			continue
		}
		var g shiftlock.Grant
		var fence uint64
		var waited bool
		var err error
		for {
			w.dom = m.doms[w.di].Load()
			changed := *m.changed.Load()
			g, fence, waited, err = m.lockEntry(ctx, w.dom, w.entry, opt.Mode, deadline, tag, opt.Queue)
			if err == nil || !membershipGone(err) || deadline.IsZero() || !time.Now().Before(deadline) {
				break
			}
			if isNoWait(ctx) {
				err = ErrWouldBlock
				break
			}
			// The membership is gone; the proxy is rejoining. Wait for it,
			// within the budget, then try again on the new one.
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
			return nil, false, err
		}
		if g == nil {
			shadowFence = fence
			continue
		}
		gr := &grant{dom: w.dom, entry: w.entry, mode: opt.Mode, g: g, refs: 1}
		m.countExcl(gr, 1)
		got = append(got, gr)
		byEntry[k] = gr
	}

	now := time.Now()
	var end time.Time
	if opt.TTL > 0 {
		end = now.Add(opt.TTL)
	}
	// Every memory node we hold on must have our lease cover the deadline.
	covered := map[*Domain]bool{}
	for _, gr := range got {
		if covered[gr.dom] || gr.dom.Lease == nil {
			continue
		}
		covered[gr.dom] = true
		if err := gr.dom.Lease.Cover(ctx, end, opt.TTL); err != nil {
			undo()
			return nil, false, err
		}
	}
	for _, h := range refresh {
		d, _ := m.Where(h.key)
		if d.Lease != nil {
			if err := d.Lease.Cover(ctx, end, opt.TTL); err != nil {
				undo()
				return nil, false, err
			}
		}
	}

	fences = make([]uint64, len(keys))
	for _, h := range refresh {
		m.setDeadline(h, end, opt.TTL)
		for i, k := range keys {
			if k == h.key {
				fences[i] = h.fence
			}
		}
	}
	// Each grant was created with one reference (dropped by undo on failure);
	// from here on, every key holding it owns one.
	if tag != 0 {
		for _, gr := range got {
			m.confirm(gr, tag)
		}
	}
	grantMu.Lock()
	for _, w := range fresh {
		if gr := byEntry[[2]uint64{uint64(w.di), w.entry}]; gr != nil {
			gr.refs++
		}
	}
	for _, gr := range got {
		gr.refs--
	}
	grantMu.Unlock()
	for _, w := range fresh {
		gr := byEntry[[2]uint64{uint64(w.di), w.entry}]
		var h *hold
		if gr == nil {
			h = &hold{key: w.key, token: token, dom: m.doms[w.di].Load(), mode: opt.Mode, fence: shadowFence, deadline: end, ttl: opt.TTL}
		} else {
			h = &hold{key: w.key, token: token, dom: gr.dom, mode: opt.Mode, fence: fenceOf(gr.g), deadline: end, ttl: opt.TTL, g: gr}
		}
		s := m.shard(w.key)
		s.mu.Lock()
		s.keys[w.key] = append(s.keys[w.key], h)
		s.mu.Unlock()
		if !end.IsZero() {
			m.exp.add(h, end)
		}
		for i, k := range keys {
			if k == w.key {
				fences[i] = h.fence
			}
		}
	}
	return fences, true, nil
}

// fenceOf is the fencing token clients see: the grant's RelCnt plus one, so
// that no fence is ever 0, which applications tend to read as "no token".
func fenceOf(g shiftlock.Grant) uint64 { return g.Token() + 1 }

// lockEntry takes one entry, waiting until deadline (zero: try once). With
// a non-zero owner tag, an entry already held under that tag (the same key
// and token through another proxy) yields a shadow: no grant, and the
// holder's fence. Neither a grant nor a shadow, with no error, means "held
// for the whole budget".
func (m *Map) lockEntry(ctx context.Context, d *Domain, entry uint64, mode shiftlock.Mode, deadline time.Time, tag uint64,
	queue func(context.Context) (context.Context, func())) (shiftlock.Grant, uint64, bool, error) {
	if d.Lease != nil {
		if err := d.Lease.Valid(); err != nil {
			return nil, 0, false, err
		}
	}
	c := d.Client
	var g *shiftlock.Guard
	var ok bool
	var err error
	var owner uint64
	var e shiftlock.Entry
	if mode == shiftlock.Shared {
		g, ok, err = c.TryShared(ctx, entry)
	} else {
		g, ok, owner, e, err = c.TryExclusiveTagged(ctx, entry)
		if err == nil && !ok && tag != 0 && owner == confirmed(tag) {
			// The same key and token hold it through another proxy: the
			// holder's token is the entry's RelCnt, read by the same CAS.
			return nil, e.RelCnt() + 1, false, nil
		}
	}
	if err != nil {
		return nil, 0, false, err
	}
	if ok {
		return g, 0, false, nil
	}
	if isNoWait(ctx) && (!deadline.IsZero() || tag != 0) {
		return nil, 0, false, ErrWouldBlock
	}
	if deadline.IsZero() {
		if tag != 0 && (owner == 0 || owner == tag) {
			// The holder may be the same key and token through another
			// proxy whose confirmation is still a round trip away (a RedLock
			// client asks every proxy at once): give it that long.
			if fence, ok := m.awaitTag(ctx, d, entry, tag, e.RelCnt()); ok {
				return nil, fence, false, nil
			}
		}
		return nil, 0, false, nil
	}
	if queue != nil {
		qctx, stop := queue(ctx)
		defer stop()
		ctx = qctx
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	shadow := make(chan uint64, 1)
	if tag != 0 {
		// The winner writes its tag one round trip after its grant, so a
		// client racing through several proxies may only see it now.
		go m.watchTag(wctx, cancel, d, entry, tag, shadow)
	}
	if mode == shiftlock.Shared {
		g, err = c.AcquireShared(wctx, entry)
	} else {
		g, err = c.AcquireExclusiveTagged(wctx, entry, tag)
	}
	if err == nil {
		return g, 0, true, nil
	}
	select {
	case fence := <-shadow:
		return nil, fence, true, nil
	default:
	}
	if wctx.Err() != nil && ctx.Err() == nil {
		return nil, 0, true, nil // budget spent: "not acquired", not an error
	}
	return nil, 0, true, err
}

// ownerTag identifies a key and token. ShiftLock carries it along the queue
// and installs it as the lock reaches a waiter, which does not mean the
// waiter's client was told (its wait may have been abandoned). The proxy
// sets the low bit once it has granted (confirmed), and only a confirmed tag
// makes another proxy answer as if it held the key too. Bit 1 keeps both
// forms non-zero, since 0 means "no owner".
func ownerTag(key, token string) uint64 {
	h := xxhash.New()
	_, _ = h.WriteString(key)
	_, _ = h.Write([]byte{0})
	_, _ = h.WriteString(token)
	return h.Sum64()&^1 | 2
}

func confirmed(tag uint64) uint64 { return tag | 1 }

// readOwner reads entry's owner word and the entry in one round trip.
func (m *Map) readOwner(ctx context.Context, d *Domain, entry uint64) (uint64, shiftlock.Entry, error) {
	l := d.Client.Endpoint().Layout()
	var tb [8]byte
	var eb [16]byte
	var b rdma.Batch
	b.Read(l.OwnerAddr(entry), tb[:])
	b.Read(l.EntryAddr(entry), eb[:])
	if err := d.Client.Endpoint().Post(ctx, &b); err != nil {
		return 0, shiftlock.Entry{}, err
	}
	if err := b.FirstErr(); err != nil {
		return 0, shiftlock.Entry{}, err
	}
	return binary.LittleEndian.Uint64(tb[:]), shiftlock.Entry(rdma.U128From(eb[:])), nil
}

// matchTag reports whether entry's holder carries confirmed(tag). On a
// match, the fence is the holder's: an exclusive holder's RelCnt is its token.
func (m *Map) matchTag(ctx context.Context, d *Domain, entry, tag uint64) (uint64, bool, error) {
	owner, e, err := m.readOwner(ctx, d, entry)
	if err != nil || owner != confirmed(tag) {
		return 0, false, err
	}
	return e.RelCnt() + 1, true, nil
}

// tagGrace bounds how long a try-only acquire waits for a fresh holder's
// tag to be confirmed. Confirmation is one round trip after the grant, so a
// couple of milliseconds covers a loaded host without making a failed
// SET NX noticeably slower.
var tagGrace = 2 * time.Millisecond // a variable for tests only

// awaitTag polls entry's owner word for up to tagGrace while it may still
// become confirmed(tag): it stops early once another owner is installed or
// the holder seen by the try (RelCnt relCnt) has released.
func (m *Map) awaitTag(ctx context.Context, d *Domain, entry, tag, relCnt uint64) (uint64, bool) {
	end := time.Now().Add(tagGrace)
	for {
		owner, e, err := m.readOwner(ctx, d, entry)
		if err != nil {
			return 0, false
		}
		switch {
		case owner == confirmed(tag):
			return e.RelCnt() + 1, true
		case owner != 0 && owner != tag, e.RelCnt() != relCnt:
			return 0, false
		}
		if !time.Now().Before(end) {
			return 0, false
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// confirm marks g's owner tag as granted, off the client's reply path: a
// RedLock client asking other proxies at the same moment finds the tag a
// round trip later through watchTag.
func (m *Map) confirm(g *grant, tag uint64) {
	guard, ok := g.g.(*shiftlock.Guard)
	if !ok {
		return
	}
	g.confirmed = make(chan struct{})
	go func() {
		defer close(g.confirmed)
		if err := guard.SetOwner(context.Background(), confirmed(tag)); err != nil {
			m.log.Warn("owner tag not confirmed; other proxies will not recognise this holder", zap.Error(err))
		}
	}()
}

func (m *Map) watchTag(ctx context.Context, stop context.CancelFunc, d *Domain, entry, tag uint64, shadow chan<- uint64) {
	iv := 2 * time.Millisecond
	t := time.NewTimer(iv)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if fence, ok, err := m.matchTag(ctx, d, entry, tag); err == nil && ok {
			shadow <- fence
			stop()
			return
		}
		if iv *= 2; iv > 50*time.Millisecond {
			iv = 50 * time.Millisecond
		}
		t.Reset(iv)
	}
}

// heldAsShadow reports whether key has a shadow hold here.
func (m *Map) heldAsShadow(key string) bool {
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.keys[key] {
		if h.shadow() {
			return true
		}
	}
	return false
}

func (m *Map) find(key, token string) *hold {
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.keys[key] {
		if h.token == token {
			return h
		}
	}
	return nil
}

func (m *Map) setDeadline(h *hold, end time.Time, ttl time.Duration) {
	s := m.shard(h.key)
	s.mu.Lock()
	if h.dead {
		s.mu.Unlock()
		return
	}
	h.deadline, h.ttl = end, ttl
	s.mu.Unlock()
	if !end.IsZero() {
		m.exp.add(h, end)
	}
}

// remove unlinks holds of key that match (token "" matches every token) and
// returns them; the caller releases their grants outside the shard lock.
func (m *Map) remove(key string, match func(*hold) bool) []*hold {
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out, kept []*hold
	for _, h := range s.keys[key] {
		if match(h) {
			h.dead = true
			out = append(out, h)
		} else {
			kept = append(kept, h)
		}
	}
	if len(kept) == 0 {
		delete(s.keys, key)
	} else {
		s.keys[key] = kept
	}
	return out
}

func (m *Map) releaseGrant(g *grant) {
	grantMu.Lock()
	g.refs--
	last := g.refs <= 0
	grantMu.Unlock()
	if !last {
		return
	}
	m.countExcl(g, -1)
	if g.confirmed != nil {
		// The release clears the owner word; the confirmation must have
		// landed first, or it could land after and name a released holder.
		<-g.confirmed
	}
	if err := g.g.Release(context.Background()); err != nil {
		m.log.Warn("release failed", zap.String("memnode", g.dom.Name), zap.Uint64("entry", g.entry), zap.Error(err))
	}
}

func (m *Map) releaseHolds(hs []*hold) {
	for _, h := range hs {
		if !h.shadow() {
			m.releaseGrant(h.g)
		}
	}
}

// Release releases key if token holds it, and reports whether it did.
func (m *Map) Release(key, token string) bool {
	hs := m.remove(key, func(h *hold) bool { return h.token == token })
	m.releaseHolds(hs)
	return len(hs) > 0
}

// Delete releases key whoever holds it through this proxy (Redis DEL). It
// reports how many holds it released.
func (m *Map) Delete(key string) int {
	hs := m.remove(key, func(*hold) bool { return true })
	m.releaseHolds(hs)
	return len(hs)
}

// Extend sets the TTL of key's hold by token (every holder if token is "").
// A non-positive TTL deletes, as PEXPIRE does in Redis.
func (m *Map) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	if ttl <= 0 {
		if token == "" {
			return m.Delete(key) > 0, nil
		}
		return m.Release(key, token), nil
	}
	s := m.shard(key)
	s.mu.Lock()
	var hs []*hold
	for _, h := range s.keys[key] {
		if token == "" || h.token == token {
			hs = append(hs, h)
		}
	}
	s.mu.Unlock()
	if len(hs) == 0 {
		return false, nil
	}
	end := time.Now().Add(ttl)
	d, _ := m.Where(key)
	if d.Lease != nil {
		if err := d.Lease.Cover(ctx, end, ttl); err != nil {
			return false, err
		}
	}
	for _, h := range hs {
		m.setDeadline(h, end, ttl)
	}
	return true, nil
}

// Persist removes key's TTL (Redis PERSIST).
func (m *Map) Persist(key string) bool {
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, h := range s.keys[key] {
		if !h.deadline.IsZero() {
			h.deadline, h.ttl = time.Time{}, 0
			n++
		}
	}
	return n > 0
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
	TTL    time.Duration // remaining; 0 = no TTL
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
	for _, h := range s.keys[key] {
		var ttl time.Duration
		if !h.deadline.IsZero() {
			if ttl = h.deadline.Sub(now); ttl < time.Millisecond {
				ttl = time.Millisecond // expiring now; Redis would still show it
			}
		}
		info.Holders = append(info.Holders, Holder{Token: h.token, Mode: h.mode, Fence: h.fence, TTL: ttl, Shadow: h.shadow()})
	}
	s.mu.Unlock()
	if len(info.Holders) > 0 {
		info.State = HeldHere
		return info, nil
	}
	if m.heldExclusivelyHere(d, e) {
		return info, nil // another key of ours owns the entry: this one is free
	}
	if isNoWait(ctx) && !rdma.IsInline(d.Client.Endpoint()) {
		return info, ErrWouldBlock
	}
	ent, err := d.Client.Read(ctx, e)
	if err == nil && !ent.Free() && d.Client.Abandoning(e) && isNoWait(ctx) {
		return info, ErrWouldBlock
	}
	// A wait of ours that its client gave up may hold the entry for a moment
	// while it passes the lock on: that is nobody's hold, so let it settle
	// (briefly: it may also be queued behind a real holder).
	for settle := time.Now().Add(abandonSettle); err == nil && !ent.Free() && d.Client.Abandoning(e) && time.Now().Before(settle); {
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

func (m *Map) countExcl(g *grant, d int) {
	if g.mode != shiftlock.Exclusive {
		return
	}
	k := entryKey{g.dom, g.entry}
	m.exclMu.Lock()
	if m.excl[k] += d; m.excl[k] <= 0 {
		delete(m.excl, k)
	}
	m.exclMu.Unlock()
}

// heldExclusivelyHere reports whether some key of this proxy holds entry e of
// d exclusively; then nobody else can hold any key on it.
func (m *Map) heldExclusivelyHere(d *Domain, e uint64) bool {
	m.exclMu.Lock()
	defer m.exclMu.Unlock()
	return m.excl[entryKey{d, e}] > 0
}

// expire is the expirer's callback: release h if its deadline still stands.
func (m *Map) expire(h *hold, at time.Time) {
	hs := m.remove(h.key, func(x *hold) bool { return x == h && !x.deadline.IsZero() && !x.deadline.After(at) })
	if len(hs) == 0 {
		return
	}
	m.releaseHolds(hs)
	if m.cfg.OnExpire != nil {
		m.cfg.OnExpire(h.key)
	}
}

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
