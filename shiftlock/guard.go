package shiftlock

import (
	"context"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// Mode is shared (reader) or exclusive (writer).
type Mode uint8

const (
	Shared Mode = iota + 1
	Exclusive
)

func (m Mode) String() string {
	if m == Shared {
		return "shared"
	}
	return "exclusive"
}

// Guard is a granted lock. Release it exactly once.
type Guard struct {
	c     *Client
	entry uint64
	mode  Mode
	token uint64

	// Writer state, passed along the queue (Algorithm 2's return values).
	self    Tail
	ch      <-chan rdma.Message
	curRel  uint64 // RelCnt as of this grant
	consWrt uint32 // writer grants in a row before this one
	epoch   uint64 // the entry's epoch while this writer holds it
	succ    Tail   // stashed Successor, if it arrived early
	succTag uint64 // the owner tag the successor acquires with
	hasSucc bool
	tag     uint64 // this writer's owner tag (Config.OwnerTags)
	granted uint8  // how the grant came: msgHandover, msgModeChanged, or 0
	done    bool
}

// Token is the fencing token: RelCnt at the grant. It strictly increases per
// entry from one exclusive grant to the next, and every shared grant's token
// lies between those of the exclusive grants before and after it. Shared
// grants of one read phase may share a value.
func (g *Guard) Token() uint64 { return g.token }

// Entry is the lock-table index of the lock.
func (g *Guard) Entry() uint64 { return g.entry }

// Mode is the mode the lock is held in.
func (g *Guard) Mode() Mode { return g.mode }

// accept validates a message on the writer's slot; a Successor is stashed.
func (g *Guard) accept(rm rdma.Message) (message, bool) {
	m, err := decode(rm.Payload)
	if err != nil || m.Entry != g.entry {
		g.c.log.Warn("dropping stray notification", zap.Uint64("entry", g.entry), zap.Uint16("from", uint16(rm.From)), zap.Error(err))
		return m, false
	}
	if m.Kind == msgSuccessor {
		g.succ = Tail{Node: rm.From, Target: rdma.Target(m.U32)}
		g.succTag = m.Value
		g.hasSucc = true
	}
	return m, true
}

// Release gives the lock up: a reader with one atomic, a writer with one
// atomic when nobody queued behind it, else by handing over to its successor.
func (g *Guard) Release(ctx context.Context) error {
	if g.done {
		return nil
	}
	g.done = true
	if g.mode == Shared {
		return g.c.releaseShared(ctx, g)
	}
	return g.c.releaseExclusive(ctx, g)
}
