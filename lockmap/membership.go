package lockmap

import (
	"errors"
	"fmt"
	"sync"

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

	id uint32 // tells memberships apart in entryTable; set by New and Replace
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
	m.track(d)
	old := m.doms[i].Swap(d)
	m.inline.Store(m.inlineNow())
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
	m.counts.forgetExcl(old)
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
