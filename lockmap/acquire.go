package lockmap

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
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
	return m.acquireAll(ctx, keys, token, opt, false)
}

// acquireAll is Acquire, or Loop.Acquire onLoop.
func (m *Map) acquireAll(ctx context.Context, keys []string, token string, opt AcquireOptions, onLoop bool) (fences []uint64, ok bool, err error) {
	fences = make([]uint64, len(keys))
	a := newAcquisition()
	ok, err = a.drive(ctx, m, keys, token, opt, fences, onLoop)
	a.free()
	if !ok {
		return nil, false, err
	}
	return fences, true, nil
}

// AcquireKey is Acquire for one key, which is what SET NX and most lock
// scripts ask for; it returns the key's fencing token and allocates less.
func (m *Map) AcquireKey(ctx context.Context, key, token string, opt AcquireOptions) (fence uint64, ok bool, err error) {
	return m.acquireKey(ctx, key, token, opt, false)
}

// acquireKey is AcquireKey, or Loop.AcquireKey onLoop.
func (m *Map) acquireKey(ctx context.Context, key, token string, opt AcquireOptions, onLoop bool) (fence uint64, ok bool, err error) {
	a := newAcquisition()
	a.kbuf[0] = key
	ok, err = a.drive(ctx, m, a.kbuf[:], token, opt, a.fbuf[:], onLoop)
	fence = a.fbuf[0]
	a.free()
	return fence, ok, err
}

// acquisitions keeps acquisitions for reuse: every acquire needs one, a
// few hundred bytes that its own stack cannot hold (its slices point into
// it), and one that finished on its caller's goroutine is garbage at once.
var acquisitions = sync.Pool{New: func() any { return new(acquisition) }}

func newAcquisition() *acquisition { return acquisitions.Get().(*acquisition) }

// free returns an acquisition that nothing refers to any more.
func (a *acquisition) free() {
	*a = acquisition{}
	acquisitions.Put(a)
}

// drive runs the acquisition with the blocking driver or, onLoop, with the
// one that refuses to block (Loop).
func (a *acquisition) drive(ctx context.Context, m *Map, keys []string, token string, opt AcquireOptions, fences []uint64, onLoop bool) (bool, error) {
	if err := a.begin(m, keys, token, opt, fences, onLoop); err != nil {
		return false, err
	}
	if a.settled {
		return a.report(false, a.err)
	}
	return a.report(a.run(ctx))
}

// An acquisition carries one acquire from its checks to its answer: what
// was asked, where the keys live, the locks taken so far and how it may
// wait. Three drivers take its lock entries:
//
//   - run (Acquire, AcquireKey) takes them one at a time in the global
//     order, waiting for each within the budget;
//   - Loop.AcquireOrQueue runs it on an event loop over in-process memory
//     nodes: a single exclusive key enqueues with its one atomic, and if
//     it has to wait in the queue the acquisition moves to the heap
//     (Queued) and waits off the loop;
//   - AcquireAsync (doorbell.go) stages a single exclusive key's atomic on
//     a doorbell and goes on when the batch is answered: at once when the
//     entry was free, on a goroutine once it has to wait in the queue.
//
// All start with begin and end with admit. An acquisition that finds it
// needs something its driver cannot do without blocking (a refresh, a
// routed key, a rejoin) goes on in run on a goroutine, as it stands
// (AcquireAsync), or is refused with ErrWouldBlock having taken nothing
// (on the loop, to be asked again off it).
type acquisition struct {
	m     *Map
	keys  []string
	token string
	opt   AcquireOptions
	// onLoop: the caller must not block (an event loop; Loop). Where run
	// would wait, it gives back what it took and answers ErrWouldBlock.
	onLoop bool
	// queueOnLoop (Loop.AcquireOrQueue): a single exclusive key with a budget
	// may enqueue on the loop instead, and wait for the handover off it.
	queueOnLoop bool

	start    time.Time
	deadline time.Time // the end of the wait budget; zero: try once
	// tag is the owner tag of a single exclusive key (shadows.go), or 0.
	tag uint64

	fresh      []want  // keys to lock, in the global order
	refresh    []*hold // keys the token holds here already (reentrant): their TTL is reset
	othersHere bool    // another token holds a key here (a shadow)

	got []*grant // the locks taken so far
	// shadow is the fence of the token's own hold through another proxy,
	// recognised by its owner tag in place of a grant (a pure shadow).
	shadow uint64
	queued bool // waited in a lock's queue
	paused bool // waited for something else: a rejoin, a shadow to go
	// enqueued is the start of an acquisition an event loop queued behind
	// a holder (Loop.AcquireOrQueue): its atomic is in the queue, and Queued
	// waits for the handover.
	enqueued *shiftlock.Start

	// settled: begin already knows the answer, not acquired (with err, if
	// any): the token holds the key already.
	settled bool
	err     error
	fences  []uint64 // the answer: one fencing token per key

	wbuf [1]want // a single key's acquire, the common one, needs no allocation
	gbuf [1]*grant
	kbuf [1]string
	fbuf [1]uint64
}

// errWouldWait is admit's answer when it may not block and has to: the
// caller finishes it where it may, with the grants still taken.
var errWouldWait = errors.New("lockmap: admission would wait")

// errEnqueued is run's answer on an event loop when its one key queued
// behind a holder (enqueued): the caller waits for it where it may.
var errEnqueued = errors.New("lockmap: queued behind a holder")

// AcquireOrQueue is AcquireKey for an event loop on in-process memory
// nodes (Inline): the third driver of an acquisition, which must not
// block. A single exclusive key with a wait budget enqueues at once, as
// AcquireKey does, with the one atomic that grants a free entry; if the key
// is held, the acquire is in the lock's queue and a Queued is returned, for
// the caller to Wait on where blocking is allowed. Anything else that
// would have to wait answers ErrWouldBlock having left nothing held, to be
// run again with AcquireKey where it may.
func (l *Loop) AcquireOrQueue(ctx context.Context, key, token string, opt AcquireOptions) (fence uint64, ok bool, q *Queued, err error) {
	a := newAcquisition()
	a.kbuf[0] = key
	if err := a.begin(l.m, a.kbuf[:], token, opt, a.fbuf[:], true); err != nil {
		a.free()
		return 0, false, nil, err
	}
	a.queueOnLoop = true
	if a.settled {
		ok, err = a.report(false, a.err)
	} else if ok, err = a.run(ctx); err == errEnqueued {
		return 0, false, &Queued{a: a}, nil // a is Queued's now
	} else {
		ok, err = a.report(ok, err)
	}
	fence = a.fbuf[0]
	a.free()
	return fence, ok, nil, err
}

// Queued is an acquire that an event loop queued behind a holder
// (Loop.AcquireOrQueue).
type Queued struct {
	a *acquisition
	// admitting: TryWait was handed the lock, and admission has to wait
	// (Wait finishes it).
	admitting bool
}

// Notify has f called whenever a message that may end the wait arrives,
// on the goroutine that delivers it: f must not block, and should have
// TryWait called where the caller waits. It reports false if the acquire
// does not wait for a message (call Wait). Notify(nil) stops it.
func (q *Queued) Notify(f func()) bool { return q.a.enqueued.Notify(f) }

// TryWait is Wait for a caller that must not block (an event loop): done
// reports that the acquire is finished, with what AcquireKey would have
// answered; mustWait that Wait has to finish it (something came that
// needs a wait, such as admission while the proxy rejoins its memory
// node). With neither, the handover has not come yet: call TryWait again
// when Notify says so, or Wait by WakeAt at the latest.
func (q *Queued) TryWait(ctx context.Context) (fence uint64, ok, done, mustWait bool, err error) {
	a := q.a
	if q.admitting {
		return 0, false, false, true, nil
	}
	g, granted, must := a.enqueued.TryWait()
	if !granted {
		return 0, false, false, must, nil
	}
	w := a.fresh[0]
	a.queued = true
	a.got = append(a.got, a.m.newGrant(w.dom, w.di, w.entry, a.opt.Mode, g))
	ok, err = a.admit(ctx, false)
	if err == errWouldWait {
		q.admitting = true
		return 0, false, false, true, nil
	}
	ok, err = a.report(ok, err)
	return a.fbuf[0], ok, true, false, err
}

// WakeAt is when a wait served by TryWait must go on with Wait if nothing
// came: the end of the acquire's budget or the lock's next failure check,
// whichever is sooner.
func (q *Queued) WakeAt() time.Time {
	t := q.a.enqueued.WakeAt()
	if d := q.a.deadline; !d.IsZero() && d.Before(t) {
		return d
	}
	return t
}

// Wait waits for the lock to be handed over, within the acquire's budget,
// and finishes the acquire: it returns what AcquireKey would have. Call it
// once, where blocking is allowed. Cancelling ctx abandons the wait; the
// lock, if it comes, is released in the background. queue, if not nil,
// replaces the Queue hook the acquire was made with, for a caller that
// waits on behalf of another command than the one that queued (a script
// run again from the start off the loop).
func (q *Queued) Wait(ctx context.Context, queue func(context.Context) (context.Context, func())) (fence uint64, ok bool, err error) {
	if queue != nil {
		q.a.opt.Queue = queue
	}
	if q.admitting {
		ok, err = q.a.report(q.a.admit(ctx, true))
	} else {
		ok, err = q.a.report(q.a.wait(ctx, q.a.enqueued))
	}
	return q.a.fbuf[0], ok, err
}

// wait finishes an acquisition whose single key queued behind a holder
// with s, where it may block: the handover, then admission.
func (a *acquisition) wait(ctx context.Context, s *shiftlock.Start) (bool, error) {
	m, w := a.m, a.fresh[0]
	guard, err := s.Wait(ctx, waitHooks(a.deadline, a.opt.Queue))
	a.queued = true
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return false, nil // budget spent: "not acquired"
		}
		return false, err
	}
	a.got = append(a.got, m.newGrant(w.dom, w.di, w.entry, a.opt.Mode, guard))
	return a.admit(ctx, true)
}

// begin checks the request and sorts its keys into fresh and refresh. An
// error means no attempt was made; an answer known without touching a
// lock (the token holds the key already) settles the acquisition.
func (a *acquisition) begin(m *Map, keys []string, token string, opt AcquireOptions, fences []uint64, onLoop bool) error {
	if m.draining.Load() {
		return ErrDraining
	}
	if opt.Mode == 0 {
		opt.Mode = shiftlock.Exclusive
	}
	if opt.TTL < 0 {
		return ErrBadTTL
	}
	if onLoop && !m.Inline() {
		return ErrWouldBlock
	}
	a.m, a.keys, a.token, a.opt, a.fences, a.onLoop = m, keys, token, opt, fences, onLoop
	a.start = time.Now()
	if opt.Wait > 0 {
		a.deadline = a.start.Add(opt.Wait)
	}
	a.got = a.gbuf[:0]
	ws := m.wants(a.wbuf[:0], keys)
	a.fresh = ws[:0]
	for _, w := range ws {
		h, others, full := m.holdsOf(w.key, token)
		a.othersHere = a.othersHere || others
		if full && h == nil && opt.Mode == shiftlock.Shared {
			a.settled = true
			a.err = fmt.Errorf("%w (%q)", ErrTooManyHolders, w.key)
			return nil
		}
		if h != nil {
			if opt.Reentrant && h.mode == shiftlock.Exclusive && opt.Mode == shiftlock.Exclusive {
				a.refresh = append(a.refresh, h)
				continue
			}
			a.settled = true
			if opt.Mode != shiftlock.Exclusive {
				a.err = fmt.Errorf("%w: %q", ErrHeldByToken, w.key)
			}
			return nil // exclusive: Redis SET NX on an existing key, not set
		}
		a.fresh = append(a.fresh, w)
	}
	// Owner tags let a single key's exclusive holder be recognised by the
	// same client asking through other proxies (RedLock over proxies that
	// share a memory node; shiftlock/owner.go).
	if len(keys) == 1 && len(a.fresh) == 1 && opt.Mode == shiftlock.Exclusive {
		a.tag = tagFor(a.fresh[0].dom, keys[0], token)
	}
	return nil
}

// report tells the map's OnAcquire how the attempt went, and returns its
// answer. An attempt refused with ErrWouldBlock runs again where it may
// wait and is told about then: reporting it here would count it twice.
func (a *acquisition) report(ok bool, err error) (bool, error) {
	if a.m.cfg.OnAcquire != nil && !errors.Is(err, ErrWouldBlock) {
		a.m.cfg.OnAcquire(a.opt.Mode, time.Since(a.start), a.queued, ok)
	}
	return ok, err
}

// undo gives back the locks taken so far.
func (a *acquisition) undo() {
	for _, g := range a.got {
		a.m.releaseGrant(g)
	}
	a.got = a.got[:0]
}

// run is the blocking driver: it takes the fresh keys' entries one at a
// time, in the global order, each within the budget, and admits them.
func (a *acquisition) run(ctx context.Context) (bool, error) {
	m := a.m
	if a.tag != 0 {
		w := a.fresh[0]
		if r := m.routerOf(w.di, w.dom); r != nil && a.opt.TTL > 0 && !a.deadline.IsZero() {
			// Quorum routing: the key's home proxy takes the lock, or
			// joins this token's hold of it (route.go). Waiting there
			// involves messages, which never run on an event loop.
			if a.onLoop {
				return false, ErrWouldBlock
			}
			gr, waited, err := r.lock(ctx, w.entry, a.tag, a.deadline, a.opt.TTL, a.opt.Queue)
			a.queued = waited
			if err != nil || gr == nil {
				return false, err
			}
			a.got = append(a.got, gr)
			return a.admitHere(ctx)
		}
		if a.othersHere {
			// Another token holds it here, as a shadow of its hold through
			// another proxy: an independent Redis instance would refuse, so
			// this proxy waits for it to go, within the budget.
			a.paused = true
			if a.deadline.IsZero() {
				return false, nil
			}
			if a.onLoop {
				return false, ErrWouldBlock
			}
			if !m.awaitOthersGone(ctx, a.keys[:1], a.token, a.deadline) {
				return false, nil
			}
		}
	}
	var idx grantIndex
	for _, w := range a.fresh {
		if idx.of(a.got, w.di, w.entry) != nil {
			continue // another key of this acquire shares the entry
		}
		took, err := a.lockEntry(ctx, w)
		if err == errEnqueued {
			return false, err // a single key: nothing else is taken
		}
		if err != nil || !took {
			a.undo()
			return false, err
		}
	}
	return a.admitHere(ctx)
}

// admitHere admits for run: on an event loop, an admission that would wait
// gives its locks back, to be asked for again where waiting is allowed.
func (a *acquisition) admitHere(ctx context.Context) (bool, error) {
	ok, err := a.admit(ctx, !a.onLoop)
	if err == errWouldWait {
		a.undo()
		return false, ErrWouldBlock
	}
	return ok, err
}

// lockEntry takes w's entry for run, retrying within the budget while the
// proxy rejoins its memory node. took: a grant was added to got, or the
// token's hold through another proxy was recognised (shadow).
func (a *acquisition) lockEntry(ctx context.Context, w want) (took bool, err error) {
	m := a.m
	for {
		dom := m.doms[w.di].Load()
		changed := *m.changed.Load()
		var r entryLock
		if a.queueOnLoop && !a.deadline.IsZero() && a.tag == 0 && a.opt.Mode == shiftlock.Exclusive && len(a.fresh) == 1 {
			r, err = enqueueOnLoop(dom, w.entry)
		} else {
			r, err = m.lockEntry(ctx, dom, w.entry, a.opt.Mode, a.deadline, a.tag, a.opt.Queue, a.onLoop)
		}
		a.queued = a.queued || r.waited
		switch {
		case err == nil && r.enqueued != nil:
			a.fresh[0].dom, a.enqueued = dom, r.enqueued
			return false, errEnqueued
		case err == nil && r.g != nil:
			a.got = append(a.got, m.newGrant(dom, w.di, w.entry, a.opt.Mode, r.g))
			return true, nil
		case err == nil:
			a.shadow = r.shadow
			return r.shadow != 0, nil
		case !membershipGone(err) || a.deadline.IsZero() || !time.Now().Before(a.deadline):
			return false, err
		case a.onLoop:
			return false, ErrWouldBlock
		}
		// The membership is gone; the proxy is rejoining. Wait for it,
		// within the budget, then try again on the new one.
		a.paused = true
		t := time.NewTimer(time.Until(a.deadline))
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			return false, err
		}
	}
}

// admit finishes an acquisition whose locks are taken (got, or a shadow's
// fence): the lease must cover the TTL, the holds are recorded (one token
// per key here, as on a Redis instance), tagged grants are vouched for,
// and TTLs are scheduled; the keys' fencing tokens go to fences. It gives
// the grants back if any step fails. Where it would have to wait and block
// is false, it answers errWouldWait with nothing recorded and the grants
// still taken, to be called again where it may block.
func (a *acquisition) admit(ctx context.Context, block bool) (ok bool, err error) {
	m, opt := a.m, a.opt
	// An acquire that did not wait was granted within a few microseconds
	// of its start; its TTL may run from there, which spares a clock read.
	now := a.start
	if a.queued || a.paused {
		now = time.Now()
	}
	var end time.Time
	if opt.TTL > 0 {
		end = now.Add(opt.TTL)
	}
	// Every memory node we hold on must have our lease cover the deadline,
	// pending grants included: their lock may arrive at any moment. Each
	// lease counts the deadline while it is pinned, until the expirer
	// has it (the end of admit).
	var pinBuf [2]pin
	pins := pinBuf[:0]
	defer func() {
		for _, p := range pins {
			p.unpin()
		}
	}()
	var seenBuf [4]*Domain
	seen := seenBuf[:0] // of got so far: a few memory nodes, however many keys
	for _, gr := range a.got {
		dup := slices.Contains(seen, gr.dom)
		if !dup {
			seen = append(seen, gr.dom)
		}
		if gr.remote() || gr.dom.Lease == nil || dup {
			continue // a share's lease is its home's
		}
		p, covered, err := coverPinned(ctx, gr.dom.Lease, end, opt.TTL, block)
		if err != nil {
			a.undo()
			return false, err
		} else if !covered {
			return false, errWouldWait // a heartbeat must be pushed first
		}
		if p.ls != nil {
			pins = append(pins, p)
		}
	}
	for _, h := range a.refresh {
		if fg := h.fwd(); fg != nil {
			if !block {
				return false, errWouldWait // a message to the key's home
			}
			if ok, err := fg.extend(ctx, opt.TTL); !ok || err != nil {
				a.undo()
				return false, err
			}
			continue
		}
		d, _ := m.Where(h.key)
		if d.Lease != nil {
			p, covered, err := coverPinned(ctx, d.Lease, end, opt.TTL, block)
			if err != nil {
				a.undo()
				return false, err
			} else if !covered {
				return false, errWouldWait
			}
			if p.ls != nil {
				pins = append(pins, p)
			}
		}
	}

	// Each grant was created with one reference (dropped by undo on failure);
	// from here on, every key holding it owns one.
	var hbuf [1]*hold
	holds := hbuf[:0]
	var idx grantIndex
	for _, w := range a.fresh {
		h := &hold{key: w.key, token: a.token, mode: opt.Mode, deadline: end, ttl: opt.TTL, since: now, expIdx: -1}
		if gr := idx.of(a.got, w.di, w.entry); gr != nil {
			h.dom, h.fence, h.g = gr.dom, fenceOf(gr.g), gr
		} else {
			h.dom, h.fence = m.doms[w.di].Load(), a.shadow
		}
		holds = append(holds, h)
	}
	for !m.record(holds) {
		// Another token's shadow appeared here while we waited: an
		// independent Redis instance would not say yes to both, so the
		// grant waits for it to go (its release is usually on its way:
		// our lock came from that same client letting go elsewhere).
		if a.deadline.IsZero() {
			a.undo()
			return false, nil
		}
		if !block {
			return false, errWouldWait
		}
		if !m.awaitOthersGone(ctx, a.keys, a.token, a.deadline) {
			a.undo()
			return false, nil
		}
	}
	grantMu.Lock()
	for _, h := range holds {
		if h.g != nil {
			h.g.refs++
		}
	}
	for _, gr := range a.got {
		gr.refs--
	}
	grantMu.Unlock()
	for _, r := range a.refresh {
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
	if a.tag != 0 {
		for _, gr := range a.got {
			if sg, ok := gr.g.(*shiftlock.Guard); ok {
				sg.Vouch()
			}
		}
	}
	if len(a.keys) <= smallScan {
		for i, k := range a.keys {
			for _, h := range a.refresh {
				if h.key == k {
					a.fences[i] = h.fence
				}
			}
			for _, h := range holds {
				if h.key == k {
					a.fences[i] = h.fence
				}
			}
		}
	} else {
		fence := make(map[string]uint64, len(a.refresh)+len(holds))
		for _, h := range a.refresh {
			fence[h.key] = h.fence
		}
		for _, h := range holds {
			fence[h.key] = h.fence // after refresh, as the scan above
		}
		for i, k := range a.keys {
			if f, ok := fence[k]; ok {
				a.fences[i] = f
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
	var seen map[string]struct{} // for many keys: a scan per key is n²
	if len(keys) > smallScan {
		seen = make(map[string]struct{}, len(keys))
	}
	for _, k := range keys {
		dup := false
		if seen != nil {
			_, dup = seen[k]
			seen[k] = struct{}{}
		} else {
			for _, w := range ws {
				dup = dup || w.key == k
			}
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

// grantIndex is grantOf for the many keys of one acquire: a scan per key
// made an acquire of n keys cost n² (a script may name 65,000 keys; 16,000
// took 10 s). It indexes got, which may only grow between lookups, once got
// is longer than a short scan.
type grantIndex struct {
	by map[[2]uint64]*grant
	n  int // got[:n] are in by
}

func (x *grantIndex) of(got []*grant, di int, e uint64) *grant {
	if len(got) <= smallScan {
		return grantOf(got, di, e)
	}
	if x.by == nil {
		x.by = make(map[[2]uint64]*grant, len(got))
	}
	for _, gr := range got[x.n:] {
		k := [2]uint64{uint64(gr.di), gr.entry}
		if _, dup := x.by[k]; !dup {
			x.by[k] = gr // the first, as grantOf finds
		}
	}
	x.n = len(got)
	return x.by[[2]uint64{uint64(di), e}]
}

// smallScan is how many items a linear search takes before an index pays.
const smallScan = 16

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

// entryLock is what lockEntry took: a grant, or (owner tags) the fence of
// the same key and token held through another proxy, recognised in its
// place; neither means the entry stayed held for the whole budget.
type entryLock struct {
	g      shiftlock.Grant
	shadow uint64
	waited bool // queued behind a holder
	// enqueued: on an event loop, queued behind a holder; the start's Wait
	// finishes the acquisition (enqueueOnLoop).
	enqueued *shiftlock.Start
}

// enqueueOnLoop takes an entry exclusively for an event loop on an
// in-process memory node: one enqueuing atomic, which grants a free entry
// and otherwise leaves the request queued, for Wait to finish off the loop.
func enqueueOnLoop(d *Domain, entry uint64) (entryLock, error) {
	if d.Lease != nil {
		if err := d.Lease.Valid(); err != nil {
			return entryLock{}, err
		}
	}
	g, s, err := d.Client.EnqueueExclusive(entry, 0)
	if err != nil {
		return entryLock{}, err
	}
	if s != nil {
		return entryLock{enqueued: s}, nil
	}
	return entryLock{g: g}, nil
}

// lockEntry takes one entry, waiting until deadline (zero: try once). A
// request with a wait budget enqueues directly: the enqueuing atomic costs
// no more than a try when the entry is free, and a try that fails would
// only add an atomic before the enqueue. With a non-zero owner tag, the
// same key and token held through another proxy (shiftlock owner
// recognition) yields a pending grant, or for a try-only request a
// shadow. onLoop: the caller must not block; a request that would wait
// tries once and answers ErrWouldBlock.
func (m *Map) lockEntry(ctx context.Context, d *Domain, entry uint64, mode shiftlock.Mode, deadline time.Time, tag uint64,
	queue func(context.Context) (context.Context, func()), onLoop bool) (entryLock, error) {
	if d.Lease != nil {
		if err := d.Lease.Valid(); err != nil {
			return entryLock{}, err
		}
	}
	c := d.Client
	if deadline.IsZero() || onLoop {
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
			return entryLock{}, err
		case ok:
			return entryLock{g: g}, nil
		case onLoop && (!deadline.IsZero() || tag != 0):
			return entryLock{}, ErrWouldBlock // it would queue, or wait for an answer
		case tag != 0:
			// The holder may be the same key and token through another
			// proxy (a RedLock client asks every proxy at once): ask the
			// queue, which costs messages, not memory-node verbs.
			if tok, same := c.QueryOwner(ctx, entry, e.Tail(), tag, tagGrace); same {
				return entryLock{shadow: tok + 1}, nil
			}
		}
		return entryLock{}, nil
	}
	// The budget only governs a wait, so its deadline (and the caller's
	// watch for a client that hangs up) is set up only if the acquire has
	// to wait: an uncontended one allocates neither.
	h := waitHooks(deadline, queue)
	var g *shiftlock.Guard
	var err error
	if mode == shiftlock.Shared {
		g, err = c.AcquireSharedHooked(ctx, entry, h)
	} else {
		g, err = c.AcquireExclusiveHooked(ctx, entry, tag, h)
	}
	if err == nil {
		return entryLock{g: g, waited: g.Waited()}, nil
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return entryLock{waited: true}, nil // budget spent: "not acquired", not an error
	}
	return entryLock{waited: true}, err
}
