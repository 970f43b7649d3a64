package baseline

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// The MCS entry is a queue tail in the first word, laid out as ShiftLock's
// TailPtr (Fig. 3): the tail waiter's node and its receive slot. The rest of
// the entry is unused.
var (
	mcsTarget = rdma.NewField(0, 24)
	mcsNode   = rdma.NewField(24, 16)
	mcsTail   = rdma.NewField(0, 40)
)

// Notifications between MCS waiters.
const (
	mcsSuccessor = 1 // "I queued behind you; my slot is U32"
	mcsHandover  = 2 // "the lock is yours"
)

// MCS is the distributed MCS lock of ShiftLock Algorithm 1, exclusive only,
// built the way ShiftLock builds its writer queue (§3.2-3.3): the tail is
// swapped in with a masked CAS whose compare mask is empty (fetch-and-store),
// a waiter announces itself to its predecessor with a Send, and the holder
// hands the lock over with a Send instead of releasing it. Releasing without
// a successor is one masked CAS that clears the tail if it is still ours.
// When both ends are on one node the notification is delivered in-process,
// as ShiftLock does (docs/shiftlock.md).
//
// An MCS lock owns its endpoint's receive handler (Bind). It is not fault
// tolerant (ShiftLock Table 1): a waiter that dies breaks the queue.
type MCS struct {
	ep     rdma.Endpoint
	layout rdma.Layout
	inbox  rdma.Inbox
	stats  MCSStats
}

// MCSStats count an MCS lock's events.
type MCSStats struct {
	Grants, Immediate, Handovers atomic.Uint64
	LocalSends, RemoteSends      atomic.Uint64
	Stray                        atomic.Uint64 // notifications for another entry, dropped
}

// NewMCS makes ep's node an MCS client; it binds ep's receive handler.
func NewMCS(ep rdma.Endpoint) *MCS {
	m := &MCS{ep: ep, layout: ep.Layout()}
	ep.Bind(m.inbox.Deliver)
	return m
}

var _ shiftlock.Locker = (*MCS)(nil)

// Entries is the number of lock entries.
func (m *MCS) Entries() uint64 { return m.layout.LockEntries }

// Stats are the lock's counters.
func (m *MCS) Stats() *MCSStats { return &m.stats }

type mcsWaiter struct {
	node   rdma.NodeID
	target rdma.Target
}

func (w mcsWaiter) value() rdma.U128 {
	return mcsNode.Value(uint64(w.node)).Or(mcsTarget.Value(uint64(w.target)))
}

func tailOf(v rdma.U128) mcsWaiter {
	return mcsWaiter{node: rdma.NodeID(mcsNode.Get(v)), target: rdma.Target(mcsTarget.Get(v))}
}

func (w mcsWaiter) isZero() bool { return w.node == 0 && w.target == 0 }

// Acquire takes entry exclusively whatever mode is asked: MCS has no shared
// mode. A queued waiter cannot leave the queue, so once enqueued it waits
// for the handover even past ctx's deadline; if ctx has ended by then it
// releases at once and returns ctx's error.
func (m *MCS) Acquire(ctx context.Context, entry uint64, _ shiftlock.Mode) (shiftlock.Grant, error) {
	if entry >= m.layout.LockEntries {
		return nil, fmt.Errorf("baseline: entry %d out of range (%d entries)", entry, m.layout.LockEntries)
	}
	t, ch, err := m.inbox.Open()
	if err != nil {
		return nil, err
	}
	g := &mcsGrant{m: m, entry: entry, addr: m.layout.EntryAddr(entry), self: mcsWaiter{m.ep.Node(), t}, ch: ch}
	vctx := context.WithoutCancel(ctx)
	old, err := m.ep.MaskedCAS128(vctx, g.addr, rdma.U128{}, rdma.U128{}, g.self.value(), mcsTail.Mask())
	if err != nil {
		m.inbox.Close(t)
		return nil, err
	}
	pred := tailOf(old)
	if pred.isZero() {
		m.stats.Grants.Add(1)
		m.stats.Immediate.Add(1)
		return g, nil
	}
	if err := m.send(vctx, pred, mcsSuccessor, entry, uint32(t)); err != nil {
		// The predecessor is gone and the queue with it.
		m.inbox.Close(t)
		return nil, fmt.Errorf("baseline: MCS entry %d: notifying predecessor %d/%#x: %w", entry, pred.node, uint32(pred.target), err)
	}
	for {
		kind := g.receive(<-ch)
		if kind == mcsHandover {
			break
		}
	}
	m.stats.Grants.Add(1)
	if err := ctx.Err(); err != nil {
		_ = g.Release(vctx)
		return nil, err
	}
	return g, nil
}

func (m *MCS) send(ctx context.Context, to mcsWaiter, kind uint8, entry uint64, u32 uint32) error {
	var p rdma.Payload
	p[0] = kind
	binary.LittleEndian.PutUint32(p[4:], u32)
	binary.LittleEndian.PutUint64(p[8:], entry)
	// Counted once delivered, so that a count seen means the message is
	// there for its receiver.
	if to.node == m.ep.Node() {
		err := m.inbox.Deliver(rdma.Message{From: to.node, To: to.target, Payload: p})
		if err == nil {
			m.stats.LocalSends.Add(1)
		}
		return err
	}
	err := m.ep.Send(ctx, to.node, to.target, p)
	if err == nil {
		m.stats.RemoteSends.Add(1)
	}
	return err
}

type mcsGrant struct {
	m       *MCS
	entry   uint64
	addr    rdma.Addr
	self    mcsWaiter
	ch      <-chan rdma.Message
	succ    mcsWaiter
	hasSucc bool
	done    bool
}

// receive handles one notification on the waiter's slot and returns its
// kind; a Successor is remembered for the release.
func (g *mcsGrant) receive(rm rdma.Message) uint8 {
	kind := rm.Payload[0]
	if binary.LittleEndian.Uint64(rm.Payload[8:]) != g.entry || (kind != mcsSuccessor && kind != mcsHandover) {
		g.m.stats.Stray.Add(1)
		return 0
	}
	if kind == mcsSuccessor {
		g.succ = mcsWaiter{node: rm.From, target: rdma.Target(binary.LittleEndian.Uint32(rm.Payload[4:]))}
		g.hasSucc = true
	}
	return kind
}

func (g *mcsGrant) Token() uint64 { return 0 }

// Release is MCS-RELEASE: hand over to a known successor, else try to clear
// the tail; if someone swapped it in meanwhile, wait for its Successor
// notification and hand over.
func (g *mcsGrant) Release(ctx context.Context) error {
	if g.done {
		return nil
	}
	g.done = true
	m := g.m
	defer m.inbox.Close(g.self.target)
	ctx = context.WithoutCancel(ctx)
	for !g.hasSucc {
		select {
		case rm := <-g.ch:
			g.receive(rm)
			continue
		default:
		}
		break
	}
	if !g.hasSucc {
		old, err := m.ep.MaskedCAS128(ctx, g.addr, g.self.value(), mcsTail.Mask(), rdma.U128{}, mcsTail.Mask())
		if err != nil {
			return err
		}
		if tailOf(old) == g.self {
			return nil
		}
		for !g.hasSucc {
			g.receive(<-g.ch)
		}
	}
	m.stats.Handovers.Add(1)
	return m.send(ctx, g.succ, mcsHandover, g.entry, 0)
}
