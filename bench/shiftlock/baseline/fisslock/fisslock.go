// Package fisslock emulates FissLock (OSDI '24), the in-network lock
// service: a decider on a programmable switch decides every grant from a
// few bits per lock, and agents on the servers keep each lock's holders and
// waiters, living on the machine of a current holder (lock fission, §3-§4).
//
// There is no switch here. The decider is a serial packet processor with a
// fixed per-packet budget (Config.SwitchPacket) and Config.Capacity lock
// slots; each machine has one core for its agent pool, which spends
// Config.ServerPacket on every packet it handles (the paper gives the pool
// one core per node, §7.1). Every link between a machine and the switch has
// one latency, Config.Hop, so a grant the switch decides takes 2 × Hop plus
// the budget, and nothing on a server. Locks beyond the switch's capacity
// fall back to ParLock, as the paper's implementation does (§6, "Lock
// scales"): a lock manager per machine, partitioned by lock ID, on the same
// core as the agent pool, reached through the switch unless the request
// comes from its own machine. Capacity 0 is ParLock alone.
//
// Run under testing/synctest's fake clock (lockbench's model fabric), the
// latencies and budgets are exact and client CPU costs nothing; in real
// time, with Hop and the budgets at 0, it is the protocol without the
// timing. What it cannot show: a real switch's pipeline works at line rate
// on many packets at once and in stages (here one packet at a time, each
// taking the whole budget), multicast and recirculation cost nothing extra
// here, packets are never lost (the retransmission and incarnation paths
// for lost packets are not exercised), and a server's cost per packet is a
// constant rather than DPDK's batches.
//
// The protocol is the paper's write-preferring one (§6): the switch marks a
// lock ww when it suspends an exclusive request, and then suspends shared
// requests too, so that writers are not starved; agents keep a FIFO queue.
// Incarnation checks (§4.2) catch the FREE or GRANT that an agent sends
// while a shared grant the switch made is still on its way to the agent.
package fisslock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// Config is the emulated testbed.
type Config struct {
	// Nodes is the number of client machines; each has an agent pool and a
	// fallback lock manager.
	Nodes int
	// Entries is the number of locks.
	Entries uint64
	// Capacity is how many locks the switch decides: IDs below it. The
	// paper's Tofino holds 1.68 million (§7.2); 0 makes every lock a
	// fallback lock (ParLock).
	Capacity uint64
	// Hop is the one-way latency between a machine and the switch.
	Hop time.Duration
	// SwitchPacket is the decider's time per packet.
	SwitchPacket time.Duration
	// ServerPacket is a machine's CPU time per packet it handles, as agent
	// pool or as lock manager.
	ServerPacket time.Duration
}

// Cluster is the switch and the machines.
type Cluster struct {
	cfg   Config
	sw    *core
	metas []meta
	nodes []*Node
	stats Stats
	// noInca turns the incarnation check off (tests: the broken variant).
	noInca bool
}

// Stats count the cluster's events.
type Stats struct {
	SwitchGrants  atomic.Uint64 // grants decided by the switch (workflows 1 and 2)
	AgentGrants   atomic.Uint64 // grants by an agent: local (4), to waiters (8), or of suspended shared requests
	Fallback      atomic.Uint64 // acquisitions of locks beyond the switch's capacity
	FallbackLocal atomic.Uint64 // ... whose lock manager was on the requester's machine
	Transfers     atomic.Uint64 // agents moved to another holder with a GRANT
	Bounces       atomic.Uint64 // packets an agent pool sent back because the agent was not there
	Refused       atomic.Uint64 // FREE or GRANT packets the incarnation check refused
}

// New starts a cluster.
func New(cfg Config) *Cluster {
	if cfg.Nodes < 1 {
		cfg.Nodes = 1
	}
	c := &Cluster{cfg: cfg}
	c.metas = make([]meta, min(cfg.Capacity, cfg.Entries))
	c.sw = newCore(cfg.SwitchPacket, c.decide)
	for i := 0; i < cfg.Nodes; i++ {
		n := &Node{c: c, id: i, agents: map[uint64]*agent{}, lm: map[uint64]*lmLock{}}
		n.pool = newCore(cfg.ServerPacket, n.handle)
		c.nodes = append(c.nodes, n)
	}
	return c
}

// Node is machine i's lock client.
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Stats are the cluster's counters.
func (c *Cluster) Stats() *Stats { return &c.stats }

// Packets are how many packets the switch and the machines' cores handled.
func (c *Cluster) Packets() (switchPkts, serverPkts uint64) {
	switchPkts = c.sw.packets()
	for _, n := range c.nodes {
		serverPkts += n.pool.packets()
	}
	return switchPkts, serverPkts
}

// Close stops the switch and the machines' cores. Requests still waiting
// are never granted.
func (c *Cluster) Close() {
	c.sw.close()
	for _, n := range c.nodes {
		n.pool.close()
	}
}

// toSwitch sends p from a machine to the switch.
func (c *Cluster) toSwitch(p pkt) { c.sw.push(p, c.cfg.Hop) }

// toPool sends p from the switch to machine n's core.
func (c *Cluster) toPool(n int, p pkt) { c.nodes[n].pool.push(p, c.cfg.Hop) }

// Node is one machine: its clients' lock calls, its agent pool and its
// fallback lock manager.
type Node struct {
	c    *Cluster
	id   int
	pool *core

	mu     sync.Mutex
	agents map[uint64]*agent
	lm     map[uint64]*lmLock // the fallback locks this machine manages
}

var _ shiftlock.Locker = (*Node)(nil)

// Entries implements shiftlock.Locker.
func (n *Node) Entries() uint64 { return n.c.cfg.Entries }

// task is one acquisition: the requester's machine and its reply channel.
type task struct {
	node  int
	mode  shiftlock.Mode
	reply chan grantMsg
}

// grantMsg is a GRANT as its requester receives it.
type grantMsg struct {
	agent *agent // the lock's agent, when it moves to the requester
}

// deliver hands a GRANT to t's client after delay.
func deliver(t *task, m grantMsg, delay time.Duration) {
	if delay <= 0 {
		t.reply <- m
		return
	}
	time.AfterFunc(delay, func() { t.reply <- m })
}

// Acquire implements shiftlock.Locker.
func (n *Node) Acquire(ctx context.Context, lid uint64, m shiftlock.Mode) (shiftlock.Grant, error) {
	if lid >= n.c.cfg.Entries {
		return nil, errors.New("fisslock: lock ID out of range")
	}
	t := &task{node: n.id, mode: m, reply: make(chan grantMsg, 1)}
	g := &Grant{n: n, t: t, lid: lid}
	if lid >= uint64(len(n.c.metas)) {
		n.lmAcquire(lid, t)
	} else if !n.localAcquire(lid, t) {
		n.c.toSwitch(pkt{kind: pktAcquire, lid: lid, t: t, mode: m})
	}
	select {
	case msg := <-t.reply:
		if msg.agent != nil {
			n.install(lid, t, msg.agent)
		}
		return g, nil
	case <-ctx.Done():
		// The request cannot be withdrawn from a queue; it is released
		// as soon as it is granted.
		go func() {
			msg := <-t.reply
			if msg.agent != nil {
				n.install(lid, t, msg.agent)
			}
			_ = g.Release(context.Background())
		}()
		return nil, ctx.Err()
	}
}

// Grant is a held lock.
type Grant struct {
	n   *Node
	t   *task
	lid uint64
}

// Token implements shiftlock.Grant: FissLock has no fencing tokens.
func (g *Grant) Token() uint64 { return 0 }

// Release implements shiftlock.Grant. It returns at once; like the paper's
// client, it does not wait for the release to reach anyone.
func (g *Grant) Release(context.Context) error {
	n := g.n
	if g.lid >= uint64(len(n.c.metas)) {
		n.lmRelease(g.lid, g.t)
		return nil
	}
	n.mu.Lock()
	a := n.agents[g.lid]
	if a != nil {
		n.release(g.lid, a, g.t)
	}
	n.mu.Unlock()
	if a == nil {
		n.c.toSwitch(pkt{kind: pktRelease, lid: g.lid, t: g.t})
	}
	return nil
}
