package lockmap

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// Doorbell gathers the atomics of lock operations started one after another
// without waiting (AcquireAsync, ReleaseAsync) and posts them together: one
// batch, one round trip per memory node, however many operations (as an
// RDMA NIC posts a chain of work requests with one doorbell; rdma.Batch).
// The proxy's event loop
// starts the operations of every command it has read in one pass and then
// rings once, so that under load many clients share each round trip, and
// the memory node's and the proxy's per-verb costs with it.
//
// A Doorbell belongs to one goroutine, its owner, which starts operations
// and rings. Ring posts and waits for the answers. Launch waits only so
// long: a memory node that has not answered by then completes later, on the
// owner, while the owner goes on with other work (an event loop serving its
// other clients), so that a memory node that stops answering holds up only
// the operations sent to it. Operations complete on the owner, once the
// memory node's answer settles them, which it does when uncontended; one
// that has to wait (queued behind a holder, for an owner's answer, for a
// lease push) completes later on a goroutine of its own. A Doorbell uses
// Ring or Launch, not both.
type Doorbell struct {
	m      *Map
	groups []*bellGroup // staged, one per memory node
	out    []*Domain    // memory nodes with a launched batch not yet in
	spare  []*bellGroup
	mark   uint64 // bumped by Mark; staging stamps groups with it

	// For Launch: posting goroutines, idle ones waiting on work; answers
	// that come while the owner waits arrive on inbox, the others through
	// back.
	work     chan *bellGroup
	quit     chan struct{} // closed by Close: idle posters exit
	quitOnce sync.Once
	inbox    chan *bellGroup
	timer    *time.Timer
	patience time.Duration
	launch   []*bellGroup

	// Go, if set, runs the functions of operations that have to wait, each
	// on a goroutine; nil: a new goroutine each. An event loop gives its
	// pool of goroutines kept for reuse, whose stacks have already grown
	// along an acquire's path.
	Go func(f func())
}

// bellGroup is what is pending for one memory-node membership.
type bellGroup struct {
	dom   *Domain
	b     rdma.Batch
	ends  []bellEnd
	waits []*bellWait
	mark  uint64 // the mark under which an operation last joined

	// A launched group's post, and who completes it: the owner waiting in
	// Launch (inline) or a task handed to back (detached).
	ctx   context.Context
	back  func(func())
	sent  time.Time
	err   error
	state atomic.Int32
}

// The states of a launched group.
const (
	postWaited   int32 = iota // the owner waits for the answer
	postLanded                // the answer is in, for the waiting owner
	postDetached              // the owner stopped waiting: back completes it
)

// bellEnd completes one staged operation once its batch is posted: an
// acquire's completion f, or a release of grant g. Releases are kept as
// values, not closures, because every batched release stages one.
type bellEnd struct {
	f   func(error)
	rel shiftlock.StagedRelease
	g   *grant
}

// bellWait is a function waiting for the groups staged when it was
// registered (After).
type bellWait struct {
	n int // groups still out
	f func()
}

// NewDoorbell returns an empty doorbell for m's lock operations.
func (m *Map) NewDoorbell() *Doorbell { return &Doorbell{m: m, quit: make(chan struct{})} }

// Close lets the goroutines that post for Launch exit once idle. Any
// goroutine may call it, more than once; a later Launch still works.
func (d *Doorbell) Close() { d.quitOnce.Do(func() { close(d.quit) }) }

// Pending reports whether anything staged waits to be posted.
func (d *Doorbell) Pending() bool { return len(d.groups) > 0 }

// InFlight reports whether a launched batch has not been answered yet: its
// answer will come later, through Launch's back (the owner's goroutine).
func (d *Doorbell) InFlight() bool { return len(d.out) > 0 }

// Len is the number of staged operations waiting to be posted.
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
			g.mark = d.mark
			return g
		}
	}
	var g *bellGroup
	if n := len(d.spare); n > 0 {
		g, d.spare = d.spare[n-1], d.spare[:n-1]
	} else {
		g = &bellGroup{}
	}
	g.dom, g.mark = dom, d.mark
	d.groups = append(d.groups, g)
	return g
}

// Mark starts a new span of operations for After: an event loop marks
// before each connection's commands.
func (d *Doorbell) Mark() { d.mark++ }

// After has f run on the owner once the operations staged since the last
// Mark have been posted and completed (at once if there are none). Other
// operations, earlier or later, do not hold it up, unless they share a
// batch with these: a memory node that stops answering stalls only those
// who sent it something. An event loop holds back a client's replies with
// it: a client told "released" must not find the key still held.
func (d *Doorbell) After(f func()) {
	var w *bellWait
	for _, g := range d.groups {
		if g.mark != d.mark {
			continue
		}
		if w == nil {
			w = &bellWait{f: f}
		}
		w.n++
		g.waits = append(g.waits, w)
	}
	if w == nil {
		f()
	}
}

// Ring posts every staged batch, waits for the memory nodes' answers and
// completes the operations. Operations started by those completions are
// staged for the next ring.
func (d *Doorbell) Ring(ctx context.Context) {
	// The staging list and d.launch trade places, so that neither is
	// allocated anew per ring.
	groups := d.groups
	d.groups = d.launch[:0]
	for _, g := range groups {
		d.complete(g, g.dom.Client.Endpoint().Post(ctx, &g.b))
	}
	clear(groups)
	d.launch = groups[:0]
}

// Launch posts the staged batches, one goroutine per memory node, and
// waits up to patience for the answers; those that are in complete at
// once. A later answer is handed to back, which must queue its completion
// to the owner (gnet: EventLoop.Execute); the owner meanwhile does other
// work. A memory node that has a batch out gets no second one: what is
// staged for it meanwhile goes out when the answer is in, so that it sees
// the batches of one doorbell one at a time and in order, as with Ring.
//
// The wait is what keeps the owner cheap: an event loop that waits a
// round trip reads the requests of that time in one pass and rings once
// for all of them, where one that never waits passes and rings for every
// few. patience bounds what a memory node that stops answering costs it.
func (d *Doorbell) Launch(ctx context.Context, patience time.Duration, back func(func())) {
	d.patience = patience
	launch := d.launch[:0]
	keep := d.groups[:0]
	for _, g := range d.groups {
		if d.isOut(g.dom) {
			keep = append(keep, g)
			continue
		}
		launch = append(launch, g)
	}
	clear(d.groups[len(keep):])
	d.groups = keep
	d.post(ctx, patience, back, launch)
	clear(launch)
	d.launch = launch[:0]
}

func (d *Doorbell) isOut(dom *Domain) bool {
	for _, o := range d.out {
		if o == dom {
			return true
		}
	}
	return false
}

// post launches groups and waits for them, as Launch describes.
func (d *Doorbell) post(ctx context.Context, patience time.Duration, back func(func()), groups []*bellGroup) {
	if len(groups) == 0 {
		return
	}
	if d.work == nil {
		d.work = make(chan *bellGroup)
		d.inbox = make(chan *bellGroup, 8)
	}
	st := postWaited
	if patience <= 0 {
		st = postDetached
	}
	now := time.Now()
	for _, g := range groups {
		d.out = append(d.out, g.dom)
		g.ctx, g.back, g.sent = ctx, back, now
		g.state.Store(st)
		select {
		case d.work <- g: // an idle poster takes it
		default:
			go d.poster(g)
		}
	}
	if st == postDetached {
		return
	}
	if d.timer == nil {
		d.timer = time.NewTimer(patience)
	} else {
		d.timer.Reset(patience)
	}
	defer d.timer.Stop()
	n := len(groups)
	for n > 0 {
		select {
		case g := <-d.inbox:
			n--
			d.landed(g, false)
		case <-d.timer.C:
			// Stop waiting; an answer already on its way still lands here.
			for _, g := range groups {
				if g.state.CompareAndSwap(postWaited, postDetached) {
					n--
				}
			}
			for ; n > 0; n-- {
				d.landed(<-d.inbox, false)
			}
		}
	}
}

// poster posts batches for the doorbell: g, then whatever comes on work.
// There are as many as the doorbell ever had batches out at once, that
// is, at most one per memory node.
func (d *Doorbell) poster(g *bellGroup) {
	for {
		g.err = g.dom.Client.Endpoint().Post(g.ctx, &g.b)
		if g.state.CompareAndSwap(postWaited, postLanded) {
			d.inbox <- g
		} else {
			g.back(func() { d.landed(g, true) })
		}
		select {
		case g = <-d.work:
		case <-d.quit:
			return
		}
	}
}

// landed completes a launched batch on the owner. One that came back
// detached then sends what was staged for its memory node while it was out
// (an inline one has nothing: the owner was waiting), and waits for that
// batch as Launch does, unless the memory node just took longer than the
// patience: then the doorbell stays out of its way until it answers in
// time again.
func (d *Doorbell) landed(g *bellGroup, detached bool) {
	dom, ctx, back, sent := g.dom, g.ctx, g.back, g.sent
	for i, o := range d.out {
		if o == dom {
			d.out = append(d.out[:i], d.out[i+1:]...)
			break
		}
	}
	d.complete(g, g.err)
	if !detached {
		return
	}
	patience := d.patience
	if time.Since(sent) >= patience {
		patience = 0
	}
	for i, ng := range d.groups {
		if ng.dom == dom {
			d.groups = append(d.groups[:i], d.groups[i+1:]...)
			d.post(ctx, patience, back, []*bellGroup{ng})
			break
		}
	}
}

// complete runs a posted batch's completions and recycles its group.
func (d *Doorbell) complete(g *bellGroup, err error) {
	for _, e := range g.ends {
		if e.f != nil {
			e.f(err)
		} else {
			d.m.finishRelease(e.g, e.rel, err)
		}
	}
	for _, w := range g.waits {
		if w.n--; w.n == 0 {
			w.f()
		}
	}
	g.b.Reset()
	clear(g.ends)
	clear(g.waits)
	g.ends, g.waits, g.dom = g.ends[:0], g.waits[:0], nil
	g.ctx, g.back, g.err = nil, nil, nil
	d.spare = append(d.spare, g)
}

// AcquireAsync is Acquire for one key, exclusive, with its atomic in d: the
// doorbell driver of an acquisition (acquire.go). done is called exactly
// once with what AcquireKey would have returned: during d's Ring when the
// memory node's answer settles the acquire, or later from a goroutine
// (Doorbell.Go) once it has to wait in the queue. What the doorbell cannot
// carry (a shared or reentrant acquire, a routed key, another token's
// shadow here, a rejoin, a lease that needs a push) goes on as it stands
// on such a goroutine, under ctx, which therefore must allow waiting (not
// a Loop). Nothing is asked of the memory node twice.
func (m *Map) AcquireAsync(d *Doorbell, ctx context.Context, key, token string, opt AcquireOptions, done func(fence uint64, ok bool, err error)) {
	a := &acquisition{}
	a.kbuf[0] = key
	if err := a.begin(m, a.kbuf[:], token, opt, a.fbuf[:], false); err != nil {
		done(0, false, err)
		return
	}
	finish := func(ok bool, err error) {
		ok, err = a.report(ok, err)
		done(a.fbuf[0], ok, err)
	}
	if a.settled {
		finish(false, a.err)
		return
	}
	if a.opt.Mode != shiftlock.Exclusive || len(a.refresh) > 0 {
		d.spawn(func() { finish(a.run(ctx)) })
		return
	}
	w := a.fresh[0]
	if a.tag != 0 && (a.othersHere || (m.routerOf(w.di, w.dom) != nil && a.opt.TTL > 0 && a.opt.Wait > 0)) {
		d.spawn(func() { finish(a.run(ctx)) }) // a shadow to wait for, or routed: messages (route.go)
		return
	}
	if w.dom.Lease != nil {
		if err := w.dom.Lease.Valid(); err != nil {
			finish(false, err)
			return
		}
	}
	g := d.group(w.dom)
	s, err := w.dom.Client.BeginExclusive(&g.b, w.entry, a.tag, a.deadline.IsZero())
	if err != nil {
		finish(false, err)
		return
	}
	g.ends = append(g.ends, bellEnd{f: func(postErr error) { a.landed(ctx, d, s, postErr, finish) }})
}

// landed goes on with a doorbell acquisition once its batch is answered,
// on the doorbell's owner, which it must not block.
func (a *acquisition) landed(ctx context.Context, d *Doorbell, s *shiftlock.Start, postErr error, finish func(bool, error)) {
	m, w := a.m, a.fresh[0]
	guard, wait, err := s.End(postErr)
	switch {
	case err != nil:
		if membershipGone(err) && !a.deadline.IsZero() {
			d.spawn(func() { finish(a.run(ctx)) }) // run waits for the rejoin within the budget
			return
		}
		finish(false, err)
	case guard != nil:
		a.got = append(a.got, m.newGrant(w.dom, w.di, w.entry, a.opt.Mode, guard))
		ok, err := a.admit(ctx, false)
		if err == errWouldWait {
			d.spawn(func() { finish(a.admit(ctx, true)) })
			return
		}
		finish(ok, err)
	case !wait && a.tag == 0:
		finish(false, nil)
	case !wait:
		// Held, try-only, tagged: ask the queue whether its owner is ours
		// (messages, and a short grace for a fresh holder).
		d.spawn(func() {
			if tok, same := w.dom.Client.QueryOwner(ctx, w.entry, s.Entry().Tail(), a.tag, tagGrace); same {
				a.shadow = tok + 1
				finish(a.admit(ctx, true))
				return
			}
			finish(false, nil)
		})
	default:
		d.spawn(func() { finish(a.wait(ctx, s)) })
	}
}

// spawn runs f, which may block, on a goroutine: Go's, or a new one.
func (d *Doorbell) spawn(f func()) {
	if d.Go != nil {
		d.Go(f)
		return
	}
	go f()
}

// waitHooks is how a queued acquire waits: the wait budget, and the
// caller's queue hook (a watch for a client that hangs up), both set up
// only once the acquire has to wait.
func waitHooks(deadline time.Time, queue func(context.Context) (context.Context, func())) shiftlock.Hooks {
	return shiftlock.Hooks{Queued: func(qctx context.Context) (context.Context, func()) {
		dctx, cancel := context.WithDeadline(qctx, deadline)
		if queue == nil {
			return dctx, cancel
		}
		hctx, stop := queue(dctx)
		return hctx, func() { stop(); cancel() }
	}}
}

// ReleaseAsync is Release with the release's atomic in d: it reports at
// once whether token held key here, and the hold is gone when it returns;
// the lock entry follows when d rings. A reply based on it is what Redis
// would answer, and any later operation of this proxy on the entry is
// posted after the release, in the same batch or a later one.
func (m *Map) ReleaseAsync(d *Doorbell, key, token string) bool {
	var buf [1]*hold
	hs := m.remove(key, func(h *hold) bool { return h.token == token }, buf[:0])
	for _, h := range hs {
		if h.g != nil {
			m.releaseGrantAsync(d, h.g)
		}
	}
	m.ended(hs, false)
	return len(hs) > 0
}

// DeleteAsync is Delete with the releases' atomics in d.
func (m *Map) DeleteAsync(d *Doorbell, key string) int {
	hs := m.remove(key, func(*hold) bool { return true }, nil)
	for _, h := range hs {
		if h.g != nil {
			m.releaseGrantAsync(d, h.g)
		}
	}
	m.ended(hs, false)
	return len(hs)
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
	grp.ends = append(grp.ends, bellEnd{rel: guard.BeginRelease(&grp.b), g: g})
}

// finishRelease completes a release staged by releaseGrantAsync.
func (m *Map) finishRelease(g *grant, r shiftlock.StagedRelease, postErr error) {
	rest, err := r.Finish(postErr)
	m.released(g) // the atomic has landed: the lock is the successor's
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
}
