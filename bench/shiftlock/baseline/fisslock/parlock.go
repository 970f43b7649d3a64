package fisslock

import "github.com/shiftlock/shiftlock-proxy/shiftlock"

// lmLock is a fallback lock in its lock manager: a classic server-side
// reader-writer lock, write-preferring with a FIFO queue, like the agents.
type lmLock struct {
	mode    shiftlock.Mode
	holders int
	wq      []*task
}

// home is the machine whose lock manager owns fallback lock lid: ParLock
// partitions locks over the machines by ID.
func (c *Cluster) home(lid uint64) int { return int(lid % uint64(len(c.nodes))) }

// lmAcquire asks lid's lock manager for it: on this machine's core without
// the network, or through the switch.
func (n *Node) lmAcquire(lid uint64, t *task) {
	n.c.stats.Fallback.Add(1)
	n.lmSend(pkt{kind: pktLMAcquire, lid: lid, t: t, home: n.c.home(lid)})
}

// lmRelease gives lid back to its lock manager, asynchronously.
func (n *Node) lmRelease(lid uint64, t *task) {
	n.lmSend(pkt{kind: pktLMRelease, lid: lid, t: t, home: n.c.home(lid)})
}

func (n *Node) lmSend(p pkt) {
	if p.home == n.id {
		if p.kind == pktLMAcquire {
			n.c.stats.FallbackLocal.Add(1)
		}
		n.pool.push(p, 0)
		return
	}
	n.c.toSwitch(p)
}

// lmHandle is the lock manager's work for one packet, on this machine's
// core.
func (n *Node) lmHandle(p pkt) {
	l := n.lm[p.lid]
	if l == nil {
		l = &lmLock{}
		n.lm[p.lid] = l
	}
	switch p.kind {
	case pktLMAcquire:
		if l.holders == 0 || (l.mode == shiftlock.Shared && p.t.mode == shiftlock.Shared && len(l.wq) == 0) {
			l.mode = p.t.mode
			l.holders++
			n.lmGrant(p.lid, p.t)
			return
		}
		l.wq = append(l.wq, p.t)
	case pktLMRelease:
		l.holders--
		if l.holders > 0 {
			return
		}
		if len(l.wq) == 0 {
			delete(n.lm, p.lid)
			return
		}
		l.mode = l.wq[0].mode
		for len(l.wq) > 0 && (l.holders == 0 || l.mode == shiftlock.Shared && l.wq[0].mode == shiftlock.Shared) {
			l.holders++
			n.lmGrant(p.lid, l.wq[0])
			l.wq = l.wq[1:]
		}
	}
}

func (n *Node) lmGrant(lid uint64, t *task) {
	if t.node == n.id {
		deliver(t, grantMsg{}, 0)
		return
	}
	n.c.toSwitch(pkt{kind: pktLMGrant, lid: lid, t: t})
}
