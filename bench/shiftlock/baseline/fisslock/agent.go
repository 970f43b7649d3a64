package fisslock

import "github.com/shiftlock/shiftlock-proxy/shiftlock"

// agent is a lock's participant state (FissLock Fig. 11): its mode, its
// holders, its FIFO wait queue, and the incarnation: how many of the
// switch's shared grants it has booked since it was created.
type agent struct {
	mode    shiftlock.Mode
	inca    uint32
	holders map[*task]struct{}
	wq      []*task
	// early holds holders that released before the switch's grant to them
	// reached the agent's books (their RELEASE overtook a bounced ACQUIRE).
	early map[*task]struct{}
}

func newAgent(m shiftlock.Mode) *agent {
	return &agent{mode: m, holders: map[*task]struct{}{}}
}

// exclusiveWaits reports whether a writer waits: then readers queue too.
func (a *agent) exclusiveWaits() bool {
	for _, w := range a.wq {
		if w.mode == shiftlock.Exclusive {
			return true
		}
	}
	return false
}

// localAcquire takes lid through this machine's agent, if it is here
// (workflows 4 and 5). It reports false when the agent is elsewhere.
func (n *Node) localAcquire(lid uint64, t *task) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	a := n.agents[lid]
	if a == nil {
		return false
	}
	n.admit(lid, a, t)
	return true
}

// admit grants t at once if it can share the lock, and queues it otherwise.
// n.mu is held.
func (n *Node) admit(lid uint64, a *agent, t *task) {
	if t.mode == shiftlock.Shared && a.mode == shiftlock.Shared && !a.exclusiveWaits() {
		a.holders[t] = struct{}{}
		n.c.stats.AgentGrants.Add(1)
		n.grantShared(lid, t)
		return
	}
	a.wq = append(a.wq, t)
}

// grantShared tells t, a new shared holder, that it holds the lock: at once
// if it is on this machine, through the switch otherwise.
func (n *Node) grantShared(lid uint64, t *task) {
	if t.node == n.id {
		deliver(t, grantMsg{}, 0)
		return
	}
	n.c.toSwitch(pkt{kind: pktGrant, lid: lid, t: t})
}

// install makes a the agent here, with t holding the lock (Fig. 7,
// grant): a GRANT that carried the agent has reached t's client. If t is
// shared, the shared waiters at the head of the queue are granted with it.
func (n *Node) install(lid uint64, t *task, a *agent) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a.mode = t.mode
	a.inca = 0
	a.holders[t] = struct{}{}
	n.agents[lid] = a
	if t.mode != shiftlock.Shared {
		return
	}
	for len(a.wq) > 0 && a.wq[0].mode == shiftlock.Shared {
		w := a.wq[0]
		a.wq = a.wq[1:]
		a.holders[w] = struct{}{}
		n.c.stats.AgentGrants.Add(1)
		n.grantShared(lid, w)
	}
}

// release removes t from a's holders (Fig. 7, release). The last holder to
// leave frees the lock on the switch, or hands it and the agent to the
// first waiter. n.mu is held.
func (n *Node) release(lid uint64, a *agent, t *task) {
	if _, ok := a.holders[t]; !ok {
		if a.early == nil {
			a.early = map[*task]struct{}{}
		}
		a.early[t] = struct{}{}
		return
	}
	delete(a.holders, t)
	n.settle(lid, a)
}

// settle gives the lock up if a has no holders left. n.mu is held.
func (n *Node) settle(lid uint64, a *agent) {
	if len(a.holders) > 0 || len(a.early) > 0 {
		return
	}
	delete(n.agents, lid)
	if len(a.wq) == 0 {
		n.c.toSwitch(pkt{kind: pktFree, lid: lid, inca: a.inca, a: a})
		return
	}
	next := a.wq[0]
	a.wq = a.wq[1:]
	n.c.toSwitch(pkt{kind: pktGrant, lid: lid, t: next, a: a, inca: a.inca, ww: a.exclusiveWaits()})
}

// handle is the agent pool's core: packets the switch forwarded here.
func (n *Node) handle(p pkt) {
	switch p.kind {
	case pktLMAcquire, pktLMRelease:
		n.lmHandle(p)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	a := n.agents[p.lid]
	switch p.kind {
	case pktAcquire:
		if a == nil {
			n.bounce(p)
			return
		}
		if !p.granted {
			n.admit(p.lid, a, p.t)
			return
		}
		a.inca++
		if _, ok := a.early[p.t]; ok {
			delete(a.early, p.t)
			n.settle(p.lid, a)
			return
		}
		a.holders[p.t] = struct{}{}
	case pktRelease:
		if a == nil {
			n.bounce(p)
			return
		}
		n.release(p.lid, a, p.t)
	case pktRefusedFree:
		// A shared grant of the switch is still on its way here; the
		// agent stays until it arrives and its holder leaves.
		n.agents[p.lid] = p.a
	case pktRefusedGrant:
		p.a.wq = append([]*task{p.t}, p.a.wq...)
		n.agents[p.lid] = p.a
	}
}

// bounce sends a packet for an agent that has left back to the switch,
// which routes it to where the agent is now (or, for a request it had
// suspended, decides it again).
func (n *Node) bounce(p pkt) {
	n.c.stats.Bounces.Add(1)
	p.bounced = true
	n.c.toSwitch(p)
}
