package lockmap

import (
	"context"
	"sync"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// grant is one ShiftLock grant. Keys of one multi-key acquire that land on
// the same entry share it; it is released when the last of them is.
type grant struct {
	dom   *Domain
	di    int // the memory node's index in the map
	entry uint64
	mode  shiftlock.Mode
	g     shiftlock.Grant
	refs  int  // guarded by grantMu
	excl  bool // counted in Map.counts: an exclusive grant that held the entry itself when granted

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

// newGrant wraps a lock-entry grant with one reference, its caller's. An
// exclusive one that holds the entry itself (not a pending grant) counts as
// this proxy's exclusive hold of it.
func (m *Map) newGrant(d *Domain, di int, entry uint64, mode shiftlock.Mode, g shiftlock.Grant) *grant {
	gr := &grant{dom: d, di: di, entry: entry, mode: mode, g: g, refs: 1}
	if mode == shiftlock.Exclusive && !gr.pending() {
		gr.excl = true
		m.counts.add(d, entry, 1, 0)
	}
	return gr
}

// fenceOf is the fencing token clients see: the grant's RelCnt plus one, so
// that no fence is ever 0, which applications tend to read as "no token".
func fenceOf(g shiftlock.Grant) uint64 { return g.Token() + 1 }

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
		var excl int32
		if g.excl {
			excl = -1
		}
		m.counts.add(g.dom, g.entry, excl, 1)
	}
	if last && g.home != nil {
		g.home.r.forget(g.home)
	}
	return last
}

// released ends the in-flight count lastRef started for g.
func (m *Map) released(g *grant) { m.counts.add(g.dom, g.entry, 0, -1) }

func (m *Map) releaseLast(g *grant) {
	if err := g.g.Release(context.Background()); err != nil {
		m.log.Warn("release failed", zap.String("memnode", g.dom.Name), zap.Uint64("entry", g.entry), zap.Error(err))
	}
	m.released(g)
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
func (m *Map) heldExclusivelyHere(d *Domain, e uint64) bool { return m.counts.get(d, e).excl > 0 }

// entryTable keeps two counts per lock entry of a membership. excl is this
// proxy's exclusive grants of it, to tell "held by another key of ours on
// the same entry" from "held elsewhere". releasing is its releases of it in
// flight: a Lookup that finds the entry held waits for them to land, so
// that a key whose lock is on its way out (an expiry the key's own client
// races) does not look held through another proxy. Every uncontended
// acquire and release counts, so the table is sharded by entry, keyed by
// one integer, and a release moves a count from excl to releasing in one
// visit. The zero value is empty.
type entryTable struct {
	shards [16]entryShard
}

type entryShard struct {
	mu sync.Mutex
	n  map[uint64]entryCounts
}

type entryCounts struct{ excl, releasing int32 }

// idleKeep is how many entries a shard keeps at zero instead of deleting:
// deleting a small map's last entry makes Go draw a new hash seed, a random
// read on every uncontended release.
const idleKeep = 8

// exclKey packs a membership and an entry; entries stay below 2^40.
func exclKey(d *Domain, e uint64) uint64 { return uint64(d.id)<<40 | e }

func (t *entryTable) add(d *Domain, e uint64, excl, releasing int32) {
	s, k := &t.shards[e%uint64(len(t.shards))], exclKey(d, e)
	s.mu.Lock()
	if s.n == nil {
		s.n = map[uint64]entryCounts{}
	}
	c := s.n[k]
	c.excl, c.releasing = max(c.excl+excl, 0), max(c.releasing+releasing, 0)
	if c == (entryCounts{}) && len(s.n) > idleKeep {
		delete(s.n, k)
	} else {
		s.n[k] = c
	}
	s.mu.Unlock()
}

func (t *entryTable) get(d *Domain, e uint64) entryCounts {
	s := &t.shards[e%uint64(len(t.shards))]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[exclKey(d, e)]
}

// forgetExcl drops membership d's exclusive counts (it is gone: Replace).
// Its releases in flight still land, and count themselves out.
func (t *entryTable) forgetExcl(d *Domain) {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for k, c := range s.n {
			if uint32(k>>40) != d.id {
				continue
			}
			if c.releasing == 0 {
				delete(s.n, k)
			} else {
				s.n[k] = entryCounts{releasing: c.releasing}
			}
		}
		s.mu.Unlock()
	}
}
