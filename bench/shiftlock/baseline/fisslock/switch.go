package fisslock

import "github.com/shiftlock/shiftlock-proxy/shiftlock"

// Packet kinds (FissLock Table 2, plus the fallback's).
type pktKind uint8

const (
	pktAcquire pktKind = iota // to the switch, or forwarded by it to the agent
	pktRelease                // a holder without the agent, to the agent
	pktFree                   // the agent, when the last holder left and nobody waits
	pktGrant                  // the agent to the next holder (with the agent) or to a shared waiter (without)
	// Refused FREE and GRANT packets come back to the agent's machine.
	pktRefusedFree
	pktRefusedGrant
	// The fallback lock manager's requests and grants, through the switch.
	pktLMAcquire
	pktLMRelease
	pktLMGrant
)

// pkt is one packet. t is the requester (mid, tid).
type pkt struct {
	kind    pktKind
	lid     uint64
	t       *task
	mode    shiftlock.Mode
	granted bool   // an ACQUIRE the switch granted, forwarded for the agent's books (workflow 2)
	bounced bool   // sent back by a machine whose agent had gone
	a       *agent // GRANT: the agent that moves; refused FREE/GRANT: the agent to restore
	inca    uint32
	ww      bool // GRANT with agent: exclusive requests still wait
	home    int  // fallback packets: the lock manager's machine
}

// Lock modes on the switch (two bits in the paper, Fig. 12).
type lockMode uint8

const (
	modeFree lockMode = iota
	modeShared
	modeExclusive
)

func modeOf(m shiftlock.Mode) lockMode {
	if m == shiftlock.Shared {
		return modeShared
	}
	return modeExclusive
}

// meta is a lock's state on the switch: its mode, the agent's machine, the
// incarnation, and the write-waiter bit of the write-preferring design (§6).
type meta struct {
	mode lockMode
	mid  uint16
	ww   bool
	inca uint32
}

// decide is the switch's pipeline (FissLock Fig. 8), one packet at a time.
func (c *Cluster) decide(p pkt) {
	hop := c.cfg.Hop
	switch p.kind {
	case pktAcquire:
		m := &c.metas[p.lid]
		switch {
		case p.bounced && p.granted:
			// Already granted; only the agent's books are behind.
			c.toPool(int(m.mid), p)
		case m.mode == modeFree:
			*m = meta{mode: modeOf(p.mode), mid: uint16(p.t.node)}
			c.stats.SwitchGrants.Add(1)
			deliver(p.t, grantMsg{agent: newAgent(p.mode)}, hop)
		case m.mode == modeShared && p.mode == shiftlock.Shared && !m.ww:
			m.inca++
			c.stats.SwitchGrants.Add(1)
			deliver(p.t, grantMsg{}, hop)
			c.toPool(int(m.mid), pkt{kind: pktAcquire, lid: p.lid, t: p.t, mode: p.mode, granted: true})
		default:
			if p.mode == shiftlock.Exclusive {
				m.ww = true
			}
			c.toPool(int(m.mid), pkt{kind: pktAcquire, lid: p.lid, t: p.t, mode: p.mode})
		}
	case pktRelease:
		c.toPool(int(c.metas[p.lid].mid), p)
	case pktFree:
		m := &c.metas[p.lid]
		if m.mode == modeExclusive || m.inca == p.inca || c.noInca {
			*m = meta{}
			return
		}
		c.stats.Refused.Add(1)
		p.kind = pktRefusedFree
		c.toPool(int(m.mid), p)
	case pktGrant:
		if p.a == nil { // a shared waiter's grant: routing only
			deliver(p.t, grantMsg{}, hop)
			return
		}
		m := &c.metas[p.lid]
		if m.mode == modeExclusive || m.inca == p.inca || c.noInca {
			*m = meta{mode: modeOf(p.t.mode), mid: uint16(p.t.node), ww: p.ww}
			c.stats.Transfers.Add(1)
			deliver(p.t, grantMsg{agent: p.a}, hop)
			return
		}
		c.stats.Refused.Add(1)
		p.kind = pktRefusedGrant
		c.toPool(int(m.mid), p)
	case pktLMAcquire, pktLMRelease:
		c.toPool(p.home, p)
	case pktLMGrant:
		deliver(p.t, grantMsg{}, hop)
	}
}
