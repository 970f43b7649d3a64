package shiftlock

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// Owner recognition (Config.OwnerTags; docs/shiftlock.md, "Owners").
//
// A proxy answers each Redis client as an independent Redis instance would,
// and a RedLock client asks every instance for the same key with the same
// token. When several proxies share a memory node, those requests meet in
// one lock entry: the first is granted, and the others must recognise it as
// their own owner instead of queueing behind it. An exclusive acquisition
// may therefore carry an owner tag (the proxy hashes key and token into
// it), and recognition rides only on messages:
//
//   - A queued writer's Successor message carries its tag. If the
//     predecessor carries the same tag, the successor subscribes to it;
//     otherwise the question travels on, as an owner query, to the writer
//     ahead of the predecessor, and so on up the queue to the holder.
//   - A writer whose owner has been told it holds the lock (Guard.Vouch)
//     answers every subscriber with msgSameOwner and its token. The
//     subscriber's acquisition returns at once with a pending guard: its
//     owner holds the lock through another node, so it may answer as that
//     instance would, while its own place in the queue completes in the
//     background (Guard.Pending) and is released once it arrives.
//   - A try-only request that finds the entry held asks the queue's tail
//     (QueryOwner), which answers the same way.
//
// An uncontended acquire or release never pays for any of it: the tag lives
// in the proxies, not in the memory node, and a lock entry is touched by
// exactly the paper's one atomic per acquire and per release.

// owner is the recognition state of one exclusive writer's slot.
type owner struct {
	mu      sync.Mutex
	entry   uint64
	tag     uint64 // 0: an untagged writer; it only relays queries
	vouched bool
	token   uint64      // what a same-owner answer carries, set when vouched
	gone    bool        // its owner let go, or was never told: it only relays
	closed  bool        // the slot is closed: nothing reaches it any more
	known   bool        // pred is set: the slot's own enqueue has landed
	self    rdma.Target // its slot: a question must not wait on its own asker
	listed  bool        // in ownerTable.listed: a question has visited it
	pred    Tail        // the writer ahead while queued; zero once granted
	subs    []query     // same-tag questions to answer once vouched
	parked  []query     // questions that arrived before pred was known
}

// query is an owner question: does a writer carry tag? Tell origin, and
// with wantNo also tell it when nobody does.
type query struct {
	tag    uint64
	origin Tail
	wantNo bool
	hops   uint8 // writers it has passed
	// viaList: a copy waiting on a node's listed writer while the
	// question walks on (ownerQuery), so nobody needs to carry it further.
	viaList bool
}

func (q query) message(entry uint64) message {
	m := message{Kind: msgOwnerQuery, Node: q.origin.Node, U32: uint32(q.origin.Target), Entry: entry, Value: q.tag, Hops: q.hops}
	if q.wantNo {
		m.Flags = flagWantNo
	}
	return m
}

// maxQueryHops bounds how far an owner question walks up a queue. A
// RedLock client sends its requests to every proxy at once, so they land
// close together, and a node's listed writers answer for the node wherever
// they stand (ownerTable); walking further would cost every queued writer
// of a long queue a message per writer ahead of it. Past the bound the
// asker waits its turn (or, a try, is told no).
const maxQueryHops = 16

// ownerTable finds a slot's recognition state by its Target, from the
// fabric's delivery goroutine, and a node's questioned writers by entry and
// tag.
//
// The second index is why a question cannot miss its owner behind a crowd.
// A question walks at most maxQueryHops writers, but a RedLock burst can
// queue more between a client's granted request and its next one;
// the holder then waits for a quorum that its own queued requests can only
// give after it let go, and every client of the key stalls for its whole
// budget. A walk crosses every proxy whose writers stand ahead of it, so it
// reaches the node of its owner's other request long before that request's
// slot; there the node answers for all its listed writers. Only writers
// that a question has visited are listed (their entry is contended): an
// uncontended acquire pays nothing for it.
type ownerTable struct {
	shards [64]struct {
		mu sync.Mutex
		m  map[rdma.Target]*owner
	}
	listed [16]struct {
		mu sync.Mutex
		m  map[ownerKey]*owner
	}
}

type ownerKey struct{ entry, tag uint64 }

// list records o as its node's writer for its entry and tag; the caller
// holds o.mu, which also guards o's place in the index.
func (t *ownerTable) list(o *owner) {
	s := &t.listed[o.entry%uint64(len(t.listed))]
	s.mu.Lock()
	if s.m == nil {
		s.m = map[ownerKey]*owner{}
	}
	s.m[ownerKey{o.entry, o.tag}] = o
	s.mu.Unlock()
	o.listed = true
}

// unlist takes o out of the index if it is listed; the caller holds o.mu.
func (t *ownerTable) unlist(o *owner) {
	if !o.listed {
		return
	}
	o.listed = false
	s := &t.listed[o.entry%uint64(len(t.listed))]
	k := ownerKey{o.entry, o.tag}
	s.mu.Lock()
	if s.m[k] == o {
		delete(s.m, k)
	}
	s.mu.Unlock()
}

// lookup returns this node's listed writer of entry with tag, if any.
func (t *ownerTable) lookup(entry, tag uint64) *owner {
	s := &t.listed[entry%uint64(len(t.listed))]
	s.mu.Lock()
	o := s.m[ownerKey{entry, tag}]
	s.mu.Unlock()
	return o
}

func (t *ownerTable) shard(tg rdma.Target) *struct {
	mu sync.Mutex
	m  map[rdma.Target]*owner
} {
	return &t.shards[uint32(tg)%uint32(len(t.shards))]
}

func (t *ownerTable) add(tg rdma.Target, o *owner) {
	s := t.shard(tg)
	s.mu.Lock()
	if s.m == nil {
		s.m = map[rdma.Target]*owner{}
	}
	s.m[tg] = o
	s.mu.Unlock()
}

func (t *ownerTable) get(tg rdma.Target) *owner {
	s := t.shard(tg)
	s.mu.Lock()
	o := s.m[tg]
	s.mu.Unlock()
	return o
}

// remove drops slot tg's recognition state and returns the questions it
// was keeping that want a no: their askers wait for an answer, and nothing
// will reach the slot any more. The others belong to queued writers, which
// simply wait their turn.
func (t *ownerTable) remove(tg rdma.Target) (unanswered []query) {
	s := t.shard(tg)
	s.mu.Lock()
	o := s.m[tg]
	delete(s.m, tg)
	s.mu.Unlock()
	if o == nil {
		return nil
	}
	o.mu.Lock()
	for _, q := range append(o.subs, o.parked...) {
		if q.wantNo && !q.viaList {
			unanswered = append(unanswered, q)
		}
	}
	o.closed, o.subs, o.parked = true, nil, nil
	t.unlist(o)
	o.mu.Unlock()
	return unanswered
}

// deliver is the node's receive handler. Owner queries are answered here, on
// the delivery path, because the writer they ask about may be holding the
// lock and not looking at its slot; a Successor is both queued for the
// writer's release and asked about, since it carries the successor's tag.
func (c *Client) deliver(rm rdma.Message) error {
	if rm.To == ServiceTarget {
		return c.service(rm)
	}
	if !c.cfg.OwnerTags {
		return c.inbox.Deliver(rm)
	}
	switch rm.Payload[0] {
	case msgOwnerQuery:
		m, err := decode(rm.Payload)
		if err != nil {
			return err
		}
		c.ownerQuery(rm.To, m.Entry, query{tag: m.Value, origin: Tail{Node: m.Node, Target: rdma.Target(m.U32)}, wantNo: m.Flags&flagWantNo != 0, hops: m.Hops})
		return nil
	case msgSuccessor:
		if err := c.inbox.Deliver(rm); err != nil {
			return err
		}
		if m, err := decode(rm.Payload); err == nil && m.Value != 0 {
			c.ownerQuery(rm.To, m.Entry, query{tag: m.Value, origin: Tail{Node: rm.From, Target: rdma.Target(m.U32)}})
		}
		return nil
	}
	return c.inbox.Deliver(rm)
}

// ownerQuery asks the writer at slot at, and those ahead of it, whether one
// carries q's tag; a same-tag writer answers when vouched. A question that
// reaches the head of the queue, or a slot already gone, without a match
// is answered no if it asked for that: a queued writer does not (it simply
// waits its turn), a try does.
//
// On arrival at a node, the question first asks the node's listed writer
// with its tag, if any (ownerTable). A vouched one answers at once. One not
// yet vouched may stand behind the asker, whose own question may in turn
// wait on the asker: so the question waits there and also walks on, and
// whichever answers first counts (a queued writer drops later answers).
func (c *Client) ownerQuery(at rdma.Target, entry uint64, q query) {
	if o := c.owners.lookup(entry, q.tag); o != nil && !(q.origin.Node == c.ep.Node() && q.origin.Target == o.self) {
		o.mu.Lock()
		if !o.closed && !o.gone {
			if o.vouched {
				token := o.token
				o.mu.Unlock()
				c.answerSame(entry, q, token)
				return
			}
			if !q.wantNo {
				lq := q
				lq.viaList = true
				o.subs = append(o.subs, lq)
			}
		}
		o.mu.Unlock()
	}
	for ; q.hops < maxQueryHops; q.hops++ {
		o := c.owners.get(at)
		if o == nil {
			c.answerNo(entry, q)
			return
		}
		o.mu.Lock()
		if o.closed || o.entry != entry {
			o.mu.Unlock()
			c.answerNo(entry, q)
			return
		}
		if !o.known {
			// A successor can be quicker than our own enqueue's reply: keep
			// the question until we know whether anyone is ahead of us.
			o.parked = append(o.parked, q)
			o.mu.Unlock()
			return
		}
		if !o.listed && !o.gone && o.tag != 0 {
			c.owners.list(o)
		}
		if o.tag == q.tag && !o.gone {
			vouched, token := o.vouched, o.token
			if !vouched {
				o.subs = append(o.subs, q)
			}
			o.mu.Unlock()
			if vouched {
				c.answerSame(entry, q, token)
			}
			return
		}
		pred := o.pred
		o.mu.Unlock()
		if pred.IsZero() {
			c.answerNo(entry, q)
			return
		}
		if pred.Node != c.ep.Node() {
			q.hops++
			c.send(context.Background(), pred, q.message(entry), func(error) { c.answerNo(entry, q) })
			return
		}
		at = pred.Target // ahead of us on this node: walk on in-process
	}
	c.answerNo(entry, q)
}

// answerSame tells q's asker that its owner holds entry, with token.
func (c *Client) answerSame(entry uint64, q query, token uint64) {
	c.send(context.Background(), q.origin, message{Kind: msgSameOwner, Entry: entry, Value: token}, nil)
}

func (c *Client) answerNo(entry uint64, q query) {
	if q.wantNo {
		c.send(context.Background(), q.origin, message{Kind: msgNotOwner, Entry: entry, Value: q.tag}, nil)
	}
}

// track registers g's slot for owner recognition with tag (0: relay only).
func (c *Client) track(g *Guard, tag uint64) {
	if !c.cfg.OwnerTags {
		return
	}
	g.ownBuf.entry, g.ownBuf.tag, g.ownBuf.self = g.entry, tag, g.self.Target
	g.own = &g.ownBuf
	c.owners.add(g.self.Target, g.own)
}

// queuedBehind records the writer ahead of g while g is queued, and takes
// up the questions that arrived before it was known.
func (g *Guard) queuedBehind(pred Tail) {
	o := g.own
	if o == nil {
		return
	}
	o.mu.Lock()
	o.pred, o.known = pred, true
	parked := o.parked
	o.parked = nil
	o.mu.Unlock()
	for _, q := range parked {
		g.c.ownerQuery(g.self.Target, g.entry, q)
	}
}

// headOfQueue records that g holds the lock itself: questions stop here.
func (g *Guard) headOfQueue() { g.queuedBehind(Tail{}) }

// letGo ends g's answers for its owner: the owner released it, or its wait
// was given up before anyone was told. The slot may stay in the queue for a
// while yet, passing the lock on, so it keeps relaying questions up the
// queue, and the questions it was keeping for a vouch that will not come
// now travel on.
func (g *Guard) letGo() {
	o := g.own
	if o == nil {
		return
	}
	o.mu.Lock()
	o.gone = true
	g.c.owners.unlist(o)
	subs := o.subs
	o.subs = nil
	o.mu.Unlock()
	for _, q := range subs {
		if !q.viaList {
			g.c.ownerQuery(g.self.Target, g.entry, q)
		}
	}
}

// Vouch records that g's owner has been told it holds the lock. From now
// until g is released, g's slot answers every question about its owner tag
// with msgSameOwner and g's token, including the questions that arrived
// before. Only a vouched writer is ever recognised: a wait that its caller
// gave up also receives the lock, but nobody was told, so nobody else may
// act on it. A guard without a tag ignores Vouch.
func (g *Guard) Vouch() {
	o := g.own
	if o == nil || o.tag == 0 {
		return
	}
	token := g.Token()
	o.mu.Lock()
	if o.closed || o.gone || o.vouched {
		o.mu.Unlock()
		return
	}
	o.vouched, o.token = true, token
	subs := o.subs
	o.subs = nil
	o.mu.Unlock()
	for _, q := range subs {
		g.c.answerSame(g.entry, q, token)
	}
}

// Retag makes g answer for owner tag tag instead of the one it was
// acquired with: its owner's identity changed while it holds the lock (a
// proxy's client re-obtained the key under a new token). From now on
// questions about the old tag are not g's, and questions about the new one
// are, once g is vouched for. Questions that were waiting for a vouch under
// the old tag travel on, as when g lets go. Tag 0 makes g answer for no
// tag at all (the new owner is not one recognition may name). A guard
// without a tag ignores Retag: its owner takes no part in recognition.
// g.tag, what the acquisition carried, stays: it only mattered while g was
// queued.
func (g *Guard) Retag(tag uint64) {
	o := g.own
	if o == nil || o.tag == 0 {
		return
	}
	o.mu.Lock()
	if o.tag == tag {
		o.mu.Unlock()
		return
	}
	g.c.owners.unlist(o) // listed under the old tag; a visit lists it anew
	o.tag = tag
	subs := o.subs
	o.subs = nil
	o.mu.Unlock()
	for _, q := range subs {
		if !q.viaList {
			g.c.ownerQuery(g.self.Target, g.entry, q)
		}
	}
}

// QueryOwner asks whether entry i, which a try found with queue tail tail,
// is held or waited for by a vouched writer with owner tag tag, and waits
// for the answer. It returns that writer's token if so. It costs no
// memory-node verb: the question goes to the tail's node and up the queue
// as messages. A queue without a same-tag writer answers no at once; one
// with a same-tag writer that is not vouched yet (granted a moment ago, or
// itself asking) answers once that writer is vouched, or lets go. The
// answer is what counts, not how fast it comes: under load the messages
// take as long as the proxies take to be scheduled. wait only bounds the
// silence of a proxy that died holding the question (OwnerAnswerCap); it
// runs out as a no.
func (c *Client) QueryOwner(ctx context.Context, i uint64, tail Tail, tag uint64, wait time.Duration) (uint64, bool) {
	if !c.cfg.OwnerTags || tag == 0 || tail.IsZero() {
		return 0, false
	}
	t, ch, err := c.inbox.Open()
	if err != nil {
		return 0, false
	}
	defer c.inbox.Close(t)
	q := query{tag: tag, origin: Tail{Node: c.ep.Node(), Target: t}, wantNo: true}
	if tail.Node == c.ep.Node() {
		c.ownerQuery(tail.Target, i, q)
	} else {
		c.send(ctx, tail, q.message(i), func(error) { c.answerNo(i, q) })
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case rm := <-ch:
			m, err := decode(rm.Payload)
			if err != nil || m.Entry != i {
				continue
			}
			switch m.Kind {
			case msgSameOwner:
				return m.Value, true
			case msgNotOwner:
				return 0, false
			}
		case <-timer.C:
			// Every question is answered unless a proxy died holding it:
			// worth a line, since the try answered no after the whole wait.
			c.log.Warn("owner question unanswered", zap.Uint64("entry", i), zap.Stringer("tail", tail), zap.Duration("waited", wait))
			return 0, false
		case <-ctx.Done():
			return 0, false
		}
	}
}
