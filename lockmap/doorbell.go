package lockmap

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// Doorbell gathers the atomics of lock operations started one after another
// without waiting (AcquireAsync, ReleaseAsync) and posts them together when
// rung: one batch, one round trip per memory node, however many operations
// (DESIGN §2: a batch of verbs is posted with one doorbell). The proxy's
// event loop starts the operations of every command it has read in one
// pass and then rings once, so that under load many clients share each
// round trip, and the memory node's and the proxy's per-verb costs with it.
//
// A Doorbell belongs to one goroutine. An operation completes during Ring
// when the memory node's answer settles it, which it does when uncontended;
// one that has to wait (queued behind a holder, for an owner's answer, for
// a lease push) completes later on a goroutine of its own.
type Doorbell struct {
	m      *Map
	groups []*bellGroup
	spare  []*bellGroup
}

// bellGroup is what is pending for one memory-node membership.
type bellGroup struct {
	dom  *Domain
	b    rdma.Batch
	ends []func(error)
}

// NewDoorbell returns an empty doorbell for m's lock operations.
func (m *Map) NewDoorbell() *Doorbell { return &Doorbell{m: m} }

// Pending reports whether anything waits for Ring.
func (d *Doorbell) Pending() bool { return len(d.groups) > 0 }

// Len is the number of operations waiting for Ring.
func (d *Doorbell) Len() int {
	n := 0
	for _, g := range d.groups {
		n += len(g.ends)
	}
	return n
}

func (d *Doorbell) group(dom *Domain) *bellGroup {
	for _, g := range d.groups {
		if g.dom == dom {
			return g
		}
	}
	var g *bellGroup
	if n := len(d.spare); n > 0 {
		g, d.spare = d.spare[n-1], d.spare[:n-1]
	} else {
		g = &bellGroup{}
	}
	g.dom = dom
	d.groups = append(d.groups, g)
	return g
}

// Ring posts every pending batch and completes their operations.
// Operations started by those completions go into the next ring.
func (d *Doorbell) Ring(ctx context.Context) {
	groups := d.groups
	d.groups = nil
	for _, g := range groups {
		err := g.dom.Client.Endpoint().Post(ctx, &g.b)
		for _, end := range g.ends {
			end(err)
		}
		g.b.Reset()
		clear(g.ends)
		g.ends, g.dom = g.ends[:0], nil
	}
	d.spare = append(d.spare, groups...)
}

// AcquireAsync is Acquire for one key, exclusive, with its atomic in d. done
// is called exactly once with what Acquire would have returned for the key:
// during d's Ring when the memory node's answer settles the acquire, or
// from a goroutine of its own when it has to wait. Anything unusual (a
// reentrant refresh, another token's shadow here, a lease that needs a
// push) takes Acquire's blocking path on that goroutine, under ctx, which
// therefore must allow waiting (not a NoWait context).
func (m *Map) AcquireAsync(d *Doorbell, ctx context.Context, key, token string, opt AcquireOptions, done func(fence uint64, ok bool, err error)) {
	blocking := func() {
		go func() {
			fences, ok, err := m.Acquire(ctx, []string{key}, token, opt)
			var f uint64
			if ok {
				f = fences[0]
			}
			done(f, ok, err)
		}()
	}
	if opt.Mode == 0 {
		opt.Mode = shiftlock.Exclusive
	}
	if opt.Mode != shiftlock.Exclusive || opt.TTL < 0 {
		blocking()
		return
	}
	if h := m.find(key, token); h != nil {
		if opt.Reentrant {
			blocking()
		} else {
			done(0, false, nil) // Redis SET NX on an existing key: not set
		}
		return
	}
	start := time.Now()
	ws := m.wants([]string{key})
	w := ws[0]
	dom := w.dom
	var tag uint64
	if dom.Client.OwnerTags() {
		tag = ownerTag(key, token)
		if m.heldByOther(key, token) {
			blocking()
			return
		}
	}
	if dom.Lease != nil {
		if err := dom.Lease.Valid(); err != nil {
			done(0, false, err)
			return
		}
	}
	report := func(fence uint64, ok, queued bool, err error) {
		if m.cfg.OnAcquire != nil {
			m.cfg.OnAcquire(opt.Mode, time.Since(start), queued, ok)
		}
		done(fence, ok, err)
	}
	var deadline time.Time
	if opt.Wait > 0 {
		deadline = start.Add(opt.Wait)
	}
	g := d.group(dom)
	s, err := dom.Client.BeginExclusive(&g.b, w.entry, tag, opt.Wait == 0)
	if err != nil {
		done(0, false, err)
		return
	}
	g.ends = append(g.ends, func(postErr error) {
		guard, wait, err := s.End(postErr)
		switch {
		case err != nil:
			if membershipGone(err) && !deadline.IsZero() {
				blocking() // the blocking path waits for the rejoin within the budget
				return
			}
			report(0, false, false, err)
		case guard != nil:
			m.admitAsync(ctx, key, token, opt, deadline, tag, ws, dom, guard, false, report, blocking)
		case !wait && tag == 0:
			report(0, false, false, nil)
		case !wait:
			// Held, try-only, tagged: ask the queue whether its owner is ours
			// (messages, and a short grace for a fresh holder).
			go func() {
				if tok, same := dom.Client.QueryOwner(ctx, w.entry, s.Entry().Tail(), tag, tagGrace); same {
					fences, ok, err := m.admit(ctx, []string{key}, token, opt, deadline, tag, ws, nil, nil, tok+1)
					report(first(fences), ok, false, err)
					return
				}
				report(0, false, false, nil)
			}()
		default:
			go func() {
				guard, err := s.Wait(m.waitContext(ctx, deadline, opt.Queue))
				if err != nil {
					if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
						err = nil // budget spent: "not acquired"
					}
					report(0, false, true, err)
					return
				}
				m.admitAsync(ctx, key, token, opt, deadline, tag, ws, dom, guard, true, report, nil)
			}()
		}
	})
}

// admitAsync admits a grant of AcquireAsync (admit). On the caller's
// goroutine it may not block: if the lease needs a push, or another token's
// shadow appeared, the grant is admitted on a goroutine instead, where
// admit may wait. blocking is nil when the caller already runs on one.
func (m *Map) admitAsync(ctx context.Context, key, token string, opt AcquireOptions, deadline time.Time, tag uint64, ws []want,
	dom *Domain, guard *shiftlock.Guard, queued bool, report func(uint64, bool, bool, error), blocking func()) {
	gr := &grant{dom: dom, di: ws[0].di, entry: ws[0].entry, mode: opt.Mode, g: guard, refs: 1}
	if !gr.pending() {
		gr.excl = true
		m.countExcl(gr, 1)
	}
	run := func(ctx context.Context) {
		fences, ok, err := m.admit(ctx, []string{key}, token, opt, deadline, tag, ws, nil, []*grant{gr}, 0)
		report(first(fences), ok, queued, err)
	}
	if blocking == nil {
		run(ctx)
		return
	}
	var end time.Time
	if opt.TTL > 0 {
		end = time.Now().Add(opt.TTL)
	}
	if (dom.Lease != nil && !dom.Lease.Covers(end, opt.TTL)) || m.heldByOther(key, token) {
		go run(ctx)
		return
	}
	// Under NoWait, admit cannot block even if another token's shadow
	// slipped in since the check; it then gives the grant back, and the
	// acquire starts over where it may wait.
	fences, ok, err := m.admit(NoWait(ctx), []string{key}, token, opt, deadline, tag, ws, nil, []*grant{gr}, 0)
	if errors.Is(err, ErrWouldBlock) {
		blocking()
		return
	}
	report(first(fences), ok, queued, err)
}

// waitContext is the context a queued acquire waits under: the wait
// budget, and the caller's queue hook (a watch for a client that hangs up),
// both set up only once the acquire has to wait.
func (m *Map) waitContext(ctx context.Context, deadline time.Time, queue func(context.Context) (context.Context, func())) context.Context {
	return shiftlock.WithQueueHook(ctx, func(qctx context.Context) (context.Context, func()) {
		dctx, cancel := context.WithDeadline(qctx, deadline)
		if queue == nil {
			return dctx, cancel
		}
		hctx, stop := queue(dctx)
		return hctx, func() { stop(); cancel() }
	})
}

func first(fences []uint64) uint64 {
	if len(fences) == 0 {
		return 0
	}
	return fences[0]
}

// ReleaseAsync is Release with the release's atomic in d: it reports at
// once whether token held key here, and the hold is gone when it returns;
// the lock entry follows when d rings. A reply based on it is what Redis
// would answer, and any later operation of this proxy on the entry is
// posted after the release, in the same batch or a later one.
func (m *Map) ReleaseAsync(d *Doorbell, key, token string) bool {
	hs := m.remove(key, func(h *hold) bool { return h.token == token })
	for _, h := range hs {
		if h.g != nil {
			m.releaseGrantAsync(d, h.g)
		}
	}
	return len(hs) > 0
}

// DeleteAsync is Delete with the releases' atomics in d.
func (m *Map) DeleteAsync(d *Doorbell, key string) int {
	hs := m.remove(key, func(*hold) bool { return true })
	for _, h := range hs {
		if h.g != nil {
			m.releaseGrantAsync(d, h.g)
		}
	}
	return len(hs)
}

type doorbellKey struct{}

// WithDoorbell returns a context under which Map operations that release a
// lock as a side effect (Extend to a TTL of 0) post their atomic on d
// instead of waiting for it.
func WithDoorbell(ctx context.Context, d *Doorbell) context.Context {
	return context.WithValue(ctx, doorbellKey{}, d)
}

func doorbellOf(ctx context.Context) *Doorbell {
	d, _ := ctx.Value(doorbellKey{}).(*Doorbell)
	return d
}

func (m *Map) releaseGrantAsync(d *Doorbell, g *grant) {
	if !m.lastRef(g) {
		return
	}
	guard, ok := g.g.(*shiftlock.Guard)
	if !ok {
		go m.releaseLast(g)
		return
	}
	grp := d.group(g.dom)
	end := guard.BeginRelease(&grp.b)
	grp.ends = append(grp.ends, func(postErr error) {
		rest, err := end(postErr)
		if rest != nil {
			go func() {
				if err := rest(); err != nil {
					m.log.Warn("release failed", zap.String("memnode", g.dom.Name), zap.Uint64("entry", g.entry), zap.Error(err))
				}
			}()
			return
		}
		if err != nil {
			m.log.Warn("release failed", zap.String("memnode", g.dom.Name), zap.Uint64("entry", g.entry), zap.Error(err))
		}
	})
}
