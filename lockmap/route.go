package lockmap

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// Quorum routing (Config.Route; docs/shiftlock.md, "Owners").
//
// A RedLock client asks every instance for the same key with the same
// token. When the instances are proxies on one memory node, owner
// recognition (shiftlock/owner.go) keeps those requests from waiting for
// each other, but each still takes a place of its own in the lock's queue:
// three atomics to acquire and three to release per lock, the lock handed
// on three times per cycle, a hot lock's queue three times as long, and
// owner questions walking up it. With routing, every proxy sends a key's
// single-key exclusive acquires to one home proxy, chosen by hashing the
// lock entry over the proxies that route, so that a quorum's requests meet
// in one process. The first takes the lock there, with the one atomic an
// acquire costs; the others join it as shares, with no verb at all. The
// lock goes when the last share lets go or runs out: it stays held for as
// long as any of the instances would say it is.
//
// Everything travels as 32-byte Sends to each proxy's
// shiftlock.ServiceTarget. Proxies find each other by hello messages to the
// nodes of the memory node's address book, twice a second; a proxy not heard
// from for three rounds stops being a home. Views may differ for a moment
// (a proxy starting or dying): two proxies may then each take a key's lock
// as its home for the same token, and owner recognition makes the later one
// a pending grant of the earlier, exactly as without routing. Routing only
// decides where a request waits; the lock entry alone decides who holds.

// Route message kinds (payload byte 0).
const (
	rtHello    = 1 // "I route": sent to every node of the address book
	rtAcquire  = 2 // id, entry, tag, ttl, wait: take or join (entry, tag) for me
	rtGranted  = 3 // id, entry, tag, fence: you hold a share
	rtBusy     = 4 // id, entry, tag: the wait budget ran out
	rtRelease  = 5 // id, entry, tag: my share (or my request) id is over
	rtExtend   = 6 // id, entry, tag, share, ttl: my share runs ttl from now
	rtExtended = 7 // id: it does
	rtNotHeld  = 8 // id: there is no such share any more
)

// routeMsg is one route message. Layout: kind u8, pad [3], id u32, entry
// u64, tag u64, then two u32 words a and b: rtAcquire's TTL and wait
// budget in ms, rtExtend's share id and TTL in ms, rtGranted's fence.
type routeMsg struct {
	kind       byte
	id         uint32
	entry, tag uint64
	a, b       uint32
}

func (r routeMsg) encode() rdma.Payload {
	var p rdma.Payload
	p[0] = r.kind
	binary.LittleEndian.PutUint32(p[4:], r.id)
	binary.LittleEndian.PutUint64(p[8:], r.entry)
	binary.LittleEndian.PutUint64(p[16:], r.tag)
	binary.LittleEndian.PutUint32(p[24:], r.a)
	binary.LittleEndian.PutUint32(p[28:], r.b)
	return p
}

func decodeRoute(p rdma.Payload) routeMsg {
	return routeMsg{
		kind:  p[0],
		id:    binary.LittleEndian.Uint32(p[4:]),
		entry: binary.LittleEndian.Uint64(p[8:]),
		tag:   binary.LittleEndian.Uint64(p[16:]),
		a:     binary.LittleEndian.Uint32(p[24:]),
		b:     binary.LittleEndian.Uint32(p[28:]),
	}
}

func millis(d time.Duration) uint32 {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > 1<<32-1 {
		return 1<<32 - 1
	}
	return uint32(ms)
}

// Timing of routing. Variables for tests only.
var (
	helloEvery = 500 * time.Millisecond
	// routeGrace is how much longer than its wait budget a forwarded
	// acquire waits for the home's answer: the home counts the budget from
	// the request's arrival and answers busy when it runs out.
	routeGrace = 100 * time.Millisecond
	// extendWait bounds how long a forwarded extend waits for the home.
	extendWait = time.Second
)

// RouteStats count quorum routing on one proxy.
type RouteStats struct {
	Forwarded    atomic.Uint64 // acquires sent to another proxy, their home
	Fallbacks    atomic.Uint64 // acquires whose home could not be reached, taken here instead
	HomeAcquires atomic.Uint64 // locks taken here as a key's home
	Joined       atomic.Uint64 // acquires answered with a lock their token already held here (local or from another proxy)
	Routers      atomic.Int64  // proxies that route, this one included, in the current view
}

// RouteStats returns the map's routing counters (all zero without Route).
func (m *Map) RouteStats() *RouteStats { return &m.rstats }

var errRouteDown = errors.New("lockmap: home proxy unreachable")

// router is quorum routing on one memory-node membership.
type router struct {
	m    *Map
	dom  *Domain
	di   int
	self rdma.NodeID
	ep   rdma.Endpoint

	view  atomic.Pointer[[]rdma.NodeID] // sorted, self included
	every time.Duration                 // hello period (helloEvery when made)

	mu     sync.Mutex
	heard  map[rdma.NodeID]time.Time
	homes  map[homeKey]*homeEntry
	out    map[uint64]int     // other proxies' shares per entry, for Lookup
	pend   map[uint32]pending // forwarded requests awaiting their answer
	nextID uint32
	quit   chan struct{}
}

type homeKey struct{ entry, tag uint64 }

// pending is a request sent to a home: only that home's answer about that
// entry completes it.
type pending struct {
	ch    chan routeMsg
	home  rdma.NodeID
	entry uint64
}

// homeEntry is a lock taken here as its key's home, or being taken: every
// share (a local hold's reference or another proxy's share) is one
// reference to g.
type homeEntry struct {
	r       *router
	key     homeKey
	g       *grant // nil while the lock is being taken
	waiters []homeWaiter
	shares  map[shareKey]*time.Timer // other proxies' shares, each with its TTL
	cancel  context.CancelFunc       // of an acquisition another proxy started
}

type shareKey struct {
	node rdma.NodeID
	id   uint32
}

type homeWaiter struct {
	node  rdma.NodeID // 0: a local acquire, answered on local
	id    uint32
	ttl   time.Duration
	local chan homeResult
}

type homeResult struct {
	g   *grant
	err error
}

func newRouter(m *Map, di int, d *Domain) *router {
	r := &router{
		m: m, dom: d, di: di, self: d.Client.Node(), ep: d.Client.Endpoint(), every: helloEvery,
		heard: map[rdma.NodeID]time.Time{}, homes: map[homeKey]*homeEntry{}, out: map[uint64]int{}, pend: map[uint32]pending{},
		quit: make(chan struct{}),
	}
	v := []rdma.NodeID{r.self}
	r.view.Store(&v)
	m.rstats.Routers.Store(1)
	d.Client.BindService(r.deliver)
	go r.hellos()
	return r
}

// stop ends the shares' timers and the hellos. The membership is gone; so
// are its locks. It does not wait for a hello round under way: a rejoin
// must not wait for sends to a memory node that may be the one gone.
func (r *router) stop() {
	close(r.quit)
	r.mu.Lock()
	for _, e := range r.homes {
		for _, t := range e.shares {
			t.Stop()
		}
		if e.cancel != nil {
			e.cancel()
		}
	}
	r.homes, r.out = map[homeKey]*homeEntry{}, map[uint64]int{}
	r.mu.Unlock()
}

// home is the proxy that takes entry's locks: rendezvous hashing over the
// view, so that a proxy coming or going moves only its own share of keys.
func (r *router) home(entry uint64) rdma.NodeID {
	best, bh := r.self, uint64(0)
	for _, n := range *r.view.Load() {
		if h := mix(entry, n); h > bh || (h == bh && n < best) {
			best, bh = n, h
		}
	}
	return best
}

func mix(entry uint64, n rdma.NodeID) uint64 {
	x := entry ^ uint64(n)*0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// hellos tells the address book's nodes that this one routes, and keeps
// the view: this node and every node heard from within three rounds.
func (r *router) hellos() {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), r.every)
		peers, err := r.ep.Control().Peers(ctx)
		cancel()
		if err == nil {
			hello := routeMsg{kind: rtHello}.encode()
			for _, p := range peers {
				if p.Node == r.self {
					continue
				}
				sctx, cancel := context.WithTimeout(context.Background(), r.every/2)
				_ = r.ep.Send(sctx, p.Node, shiftlock.ServiceTarget, hello) // a node that does not route refuses it
				cancel()
			}
		}
		r.prune()
		select {
		case <-r.quit:
			return
		case <-t.C:
		}
	}
}

func (r *router) prune() {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := time.Now().Add(-3 * r.every)
	changed := false
	for n, at := range r.heard {
		if at.Before(old) {
			delete(r.heard, n)
			changed = true
		}
	}
	if changed {
		r.setView()
	}
}

// setView publishes self and the nodes heard from; r.mu is held.
func (r *router) setView() {
	v := make([]rdma.NodeID, 0, len(r.heard)+1)
	v = append(v, r.self)
	for n := range r.heard {
		v = append(v, n)
	}
	slices.Sort(v)
	r.view.Store(&v)
	r.m.rstats.Routers.Store(int64(len(v)))
}

// send posts a message from a goroutine of its own: the delivery goroutine
// must not wait for a round trip.
func (r *router) send(to rdma.NodeID, msg routeMsg) { go r.sendNow(to, msg) }

// sendNow posts a message and waits for the fabric to take it.
func (r *router) sendNow(to rdma.NodeID, msg routeMsg) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.ep.Send(ctx, to, shiftlock.ServiceTarget, msg.encode()); err != nil {
		r.m.log.Debug("route message not delivered", zap.Uint16("to", uint16(to)), zap.Uint8("kind", msg.kind), zap.Error(err))
	}
}

// deliver handles a message to the service target, on the fabric's
// delivery goroutine.
func (r *router) deliver(rm rdma.Message) error {
	msg := decodeRoute(rm.Payload)
	switch msg.kind {
	case rtHello:
		r.mu.Lock()
		_, known := r.heard[rm.From]
		r.heard[rm.From] = time.Now()
		if !known && rm.From != r.self {
			r.setView()
		}
		r.mu.Unlock()
	case rtAcquire:
		r.onAcquire(rm.From, msg)
	case rtRelease:
		r.onRelease(rm.From, msg.id, homeKey{msg.entry, msg.tag})
	case rtExtend:
		r.onExtend(rm.From, msg)
	case rtGranted, rtBusy, rtExtended, rtNotHeld:
		r.mu.Lock()
		p, ok := r.pend[msg.id]
		ok = ok && p.home == rm.From && (p.entry == msg.entry || msg.kind == rtExtended || msg.kind == rtNotHeld)
		if ok {
			delete(r.pend, msg.id)
		}
		r.mu.Unlock()
		switch {
		case ok:
			p.ch <- msg // buffered: one answer per request
		case msg.kind == rtGranted:
			// Its requester gave up before the answer came: give it back.
			r.send(rm.From, routeMsg{kind: rtRelease, id: msg.id, entry: msg.entry, tag: msg.tag})
		}
	default:
		return rdma.ErrBadRequest
	}
	return nil
}

// lock takes entry for tag through its home: here (joining a lock this
// token's other requests hold or are taking) or at another proxy. A grant
// comes with one reference for the caller. No grant and no error: still
// held by another when deadline came.
func (r *router) lock(ctx context.Context, entry, tag uint64, deadline time.Time, ttl time.Duration,
	queue func(context.Context) (context.Context, func())) (*grant, bool, error) {
	home := r.home(entry)
	if home == r.self {
		return r.joinLocal(ctx, entry, tag, deadline, queue)
	}
	g, waited, err := r.forward(ctx, home, entry, tag, deadline, ttl, queue)
	if errors.Is(err, errRouteDown) {
		// The home is gone, or not a router after all: take the lock here.
		// Owner recognition still finds the token's other requests.
		r.m.rstats.Fallbacks.Add(1)
		got, err := r.m.lockEntry(ctx, r.dom, entry, shiftlock.Exclusive, deadline, tag, queue, false)
		if err != nil || got.g == nil {
			return nil, got.waited, err
		}
		return r.m.newGrant(r.dom, r.di, entry, shiftlock.Exclusive, got.g), got.waited, nil
	}
	return g, waited, err
}

// expect registers a request to home about entry; its answer arrives on
// the channel.
func (r *router) expect(home rdma.NodeID, entry uint64) (uint32, chan routeMsg) {
	ch := make(chan routeMsg, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID++
	r.pend[r.nextID] = pending{ch: ch, home: home, entry: entry}
	return r.nextID, ch
}

// forgo drops a request's registration; a late answer is then a stranger's.
func (r *router) forgo(id uint32) {
	r.mu.Lock()
	delete(r.pend, id)
	r.mu.Unlock()
}

// forward asks home for a share of entry's lock for tag.
func (r *router) forward(ctx context.Context, home rdma.NodeID, entry, tag uint64, deadline time.Time, ttl time.Duration,
	queue func(context.Context) (context.Context, func())) (*grant, bool, error) {
	id, ch := r.expect(home, entry)
	r.m.rstats.Forwarded.Add(1)
	wait := time.Until(deadline)
	msg := routeMsg{kind: rtAcquire, id: id, entry: entry, tag: tag, a: millis(ttl), b: millis(max(wait, time.Millisecond))}
	if err := r.ep.Send(ctx, home, shiftlock.ServiceTarget, msg.encode()); err != nil {
		r.forgo(id)
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		return nil, false, errRouteDown
	}
	t := time.NewTimer(wait + routeGrace)
	defer t.Stop()
	wctx := ctx
	if queue != nil {
		// The caller's watch: a client that hangs up withdraws the request.
		var stop func()
		wctx, stop = queue(ctx)
		defer stop()
	}
	select {
	case a := <-ch:
		if a.kind != rtGranted {
			return nil, true, nil
		}
		fg := &fwdGrant{r: r, home: home, id: id, entry: entry, tag: tag, fence: a.fence()}
		return &grant{dom: r.dom, di: r.di, entry: entry, mode: shiftlock.Exclusive, g: fg, refs: 1}, true, nil
	case <-t.C:
	case <-wctx.Done():
	}
	r.forgo(id)
	select {
	case a := <-ch: // the answer slipped in: honour it by giving it back
		if a.kind == rtGranted {
			r.send(home, routeMsg{kind: rtRelease, id: id, entry: entry, tag: tag})
		}
	default:
		// Withdraw the request; a grant still on its way is given back
		// when it lands (deliver).
		r.send(home, routeMsg{kind: rtRelease, id: id, entry: entry, tag: tag})
	}
	if err := wctx.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, true, err
	}
	return nil, true, nil
}

// fwdGrant is a share of a lock held by the key's home proxy.
type fwdGrant struct {
	r     *router
	home  rdma.NodeID
	id    uint32
	entry uint64
	tag   uint64
	fence uint64
}

func (f *fwdGrant) Token() uint64 { return f.fence - 1 }

func (f *fwdGrant) Release(ctx context.Context) error {
	return f.r.ep.Send(ctx, f.home, shiftlock.ServiceTarget, routeMsg{kind: rtRelease, id: f.id, entry: f.entry, tag: f.tag}.encode())
}

// extend asks the home to run f's share for ttl from now; false: the share
// is gone.
func (f *fwdGrant) extend(ctx context.Context, ttl time.Duration) (bool, error) {
	r := f.r
	id, ch := r.expect(f.home, f.entry)
	defer r.forgo(id)
	msg := routeMsg{kind: rtExtend, id: id, entry: f.entry, tag: f.tag, a: f.id, b: millis(ttl)}
	if err := r.ep.Send(ctx, f.home, shiftlock.ServiceTarget, msg.encode()); err != nil {
		return false, err
	}
	t := time.NewTimer(extendWait)
	defer t.Stop()
	select {
	case a := <-ch:
		return a.kind == rtExtended, nil
	case <-t.C:
		return false, errRouteDown
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// joinLocal takes or joins the lock here, the key's home, for a local
// acquire.
func (r *router) joinLocal(ctx context.Context, entry, tag uint64, deadline time.Time,
	queue func(context.Context) (context.Context, func())) (*grant, bool, error) {
	k := homeKey{entry, tag}
	r.mu.Lock()
	e := r.homes[k]
	if e != nil && e.g != nil {
		if addRef(e.g) {
			r.mu.Unlock()
			r.m.rstats.Joined.Add(1)
			return e.g, false, nil
		}
		e = nil // its last share is letting go: take the lock anew
	}
	if e == nil {
		e = &homeEntry{r: r, key: k}
		r.homes[k] = e
		r.mu.Unlock()
		return r.take(ctx, e, deadline, queue, true)
	}
	ch := make(chan homeResult, 1)
	e.waiters = append(e.waiters, homeWaiter{local: ch})
	r.mu.Unlock()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case res := <-ch:
		if res.g != nil {
			r.m.rstats.Joined.Add(1)
		}
		return res.g, true, res.err
	case <-t.C:
	case <-ctx.Done():
	}
	r.mu.Lock()
	e.waiters = slices.DeleteFunc(e.waiters, func(w homeWaiter) bool { return w.local == ch })
	r.mu.Unlock()
	select {
	case res := <-ch: // answered meanwhile
		if res.g != nil {
			r.m.releaseGrant(res.g)
		}
	default:
	}
	return nil, true, ctx.Err()
}

// onAcquire is another proxy asking for a share, on the delivery
// goroutine.
func (r *router) onAcquire(from rdma.NodeID, msg routeMsg) {
	k := homeKey{msg.entry, msg.tag}
	w := homeWaiter{node: from, id: msg.id, ttl: time.Duration(msg.a) * time.Millisecond}
	r.mu.Lock()
	e := r.homes[k]
	if e != nil && e.g != nil {
		if addRef(e.g) {
			r.addShare(e, w)
			g := e.g
			r.mu.Unlock()
			r.m.rstats.Joined.Add(1)
			go r.granted(g, w)
			return
		}
		e = nil
	}
	if e == nil {
		e = &homeEntry{r: r, key: k}
		r.homes[k] = e
		e.waiters = append(e.waiters, w)
		ctx, cancel := context.WithCancel(context.Background())
		e.cancel = cancel
		r.mu.Unlock()
		deadline := time.Now().Add(time.Duration(msg.b) * time.Millisecond)
		go func() { _, _, _ = r.take(ctx, e, deadline, nil, false) }()
		return
	}
	e.waiters = append(e.waiters, w)
	r.mu.Unlock()
}

// take runs the acquisition of e's lock and hands the outcome to e's
// waiters. With mine, the caller is one of them and gets a reference too.
func (r *router) take(ctx context.Context, e *homeEntry, deadline time.Time,
	queue func(context.Context) (context.Context, func()), mine bool) (*grant, bool, error) {
	got, err := r.m.lockEntry(ctx, r.dom, e.key.entry, shiftlock.Exclusive, deadline, e.key.tag, queue, false)
	waited := got.waited
	var gr *grant
	if err == nil && got.g != nil {
		r.m.rstats.HomeAcquires.Add(1)
		gr = r.m.newGrant(r.dom, r.di, e.key.entry, shiftlock.Exclusive, got.g)
		gr.home = e // its references are set below, one per waiter
	}
	r.mu.Lock()
	ws := e.waiters
	e.waiters = nil
	e.cancel = nil
	if gr == nil {
		if r.homes[e.key] == e {
			delete(r.homes, e.key)
		}
	} else {
		e.g = gr
		refs := len(ws)
		if mine {
			refs++
		}
		grantMu.Lock()
		gr.refs = refs
		grantMu.Unlock()
		for _, w := range ws {
			if w.local == nil {
				r.addShare(e, w)
			}
		}
	}
	r.mu.Unlock()
	for _, w := range ws {
		switch {
		case w.local != nil:
			w.local <- homeResult{g: gr, err: err}
		case gr != nil:
			go r.granted(gr, w)
		default:
			r.send(w.node, routeMsg{kind: rtBusy, id: w.id, entry: e.key.entry, tag: e.key.tag})
		}
	}
	if gr != nil && len(ws) == 0 && !mine {
		// Everyone who asked gave up meanwhile.
		grantMu.Lock()
		gr.refs = 1
		grantMu.Unlock()
		r.m.releaseGrant(gr)
		return nil, waited, nil
	}
	if !mine || gr == nil {
		return nil, waited, err
	}
	return gr, waited, nil
}

// addShare records w's share of e, with its TTL; r.mu is held and w's
// reference is counted.
func (r *router) addShare(e *homeEntry, w homeWaiter) {
	if e.shares == nil {
		e.shares = map[shareKey]*time.Timer{}
	}
	sk := shareKey{w.node, w.id}
	if old := e.shares[sk]; old != nil {
		old.Stop() // a repeated request: one share, one reference
		e.shares[sk] = time.AfterFunc(w.ttl, func() { r.onRelease(w.node, w.id, e.key) })
		grantMu.Lock()
		e.g.refs--
		grantMu.Unlock()
		return
	}
	e.shares[sk] = time.AfterFunc(w.ttl, func() { r.onRelease(w.node, w.id, e.key) })
	r.out[e.key.entry]++
}

// granted tells w it holds a share of g, once the lease covers the share's
// TTL: the memory node must not give the lock away while a share runs.
func (r *router) granted(g *grant, w homeWaiter) {
	if r.dom.Lease != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.dom.Lease.Cover(ctx, time.Now().Add(w.ttl), w.ttl)
		cancel()
		if err != nil {
			r.m.log.Warn("routed share refused: lease", zap.Error(err))
			r.onRelease(w.node, w.id, g.home.key)
			r.sendNow(w.node, routeMsg{kind: rtBusy, id: w.id, entry: g.entry, tag: g.home.key.tag})
			return
		}
	}
	if sg, ok := g.g.(*shiftlock.Guard); ok {
		sg.Vouch() // its owner is about to be told
	}
	f := fenceOf(g.g)
	r.sendNow(w.node, routeMsg{kind: rtGranted, id: w.id, entry: g.entry, tag: g.home.key.tag, a: uint32(f), b: uint32(f >> 32)})
}

// fence is what rtGranted carries in its last two words.
func (r routeMsg) fence() uint64 { return uint64(r.a) | uint64(r.b)<<32 }

// onRelease ends another proxy's share (or withdraws its request): a
// release, an expiry, or a requester that gave up.
func (r *router) onRelease(from rdma.NodeID, id uint32, k homeKey) {
	r.mu.Lock()
	e := r.homes[k]
	if e == nil {
		r.mu.Unlock()
		return
	}
	if e.g == nil {
		e.waiters = slices.DeleteFunc(e.waiters, func(w homeWaiter) bool { return w.local == nil && w.node == from && w.id == id })
		if len(e.waiters) == 0 && e.cancel != nil {
			e.cancel() // nobody waits for it any more
		}
		r.mu.Unlock()
		return
	}
	t := e.shares[shareKey{from, id}]
	if t == nil {
		r.mu.Unlock()
		return
	}
	t.Stop()
	delete(e.shares, shareKey{from, id})
	if r.out[k.entry]--; r.out[k.entry] <= 0 {
		delete(r.out, k.entry)
	}
	g := e.g
	r.mu.Unlock()
	if r.m.lastRef(g) {
		go r.m.releaseLast(g)
	}
}

// onExtend restarts a share's TTL.
func (r *router) onExtend(from rdma.NodeID, msg routeMsg) {
	k := homeKey{msg.entry, msg.tag}
	sk := shareKey{from, msg.a}
	ttl := time.Duration(msg.b) * time.Millisecond
	r.mu.Lock()
	var t *time.Timer
	if e := r.homes[k]; e != nil && e.g != nil {
		t = e.shares[sk]
	}
	if t == nil {
		r.mu.Unlock()
		r.send(from, routeMsg{kind: rtNotHeld, id: msg.id})
		return
	}
	t.Reset(ttl)
	r.mu.Unlock()
	go func() {
		if r.dom.Lease != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := r.dom.Lease.Cover(ctx, time.Now().Add(ttl), ttl)
			cancel()
			if err != nil {
				r.sendNow(from, routeMsg{kind: rtNotHeld, id: msg.id})
				return
			}
		}
		r.sendNow(from, routeMsg{kind: rtExtended, id: msg.id})
	}()
}

// sharedOut reports whether entry is held here for other proxies' shares.
func (r *router) sharedOut(entry uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out[entry] > 0
}

// forget drops e once its lock's last reference is gone.
func (r *router) forget(e *homeEntry) {
	r.mu.Lock()
	if r.homes[e.key] == e {
		delete(r.homes, e.key)
	}
	r.mu.Unlock()
}

// addRef takes one more reference to g unless its last one is already
// gone (its release is under way).
func addRef(g *grant) bool {
	grantMu.Lock()
	defer grantMu.Unlock()
	if g.refs <= 0 {
		return false
	}
	g.refs++
	return true
}
