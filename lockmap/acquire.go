package lockmap

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/shiftlock/shiftlock-proxy/shiftlock"
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
