package shiftlock

import (
	"sync"

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
