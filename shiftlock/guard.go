package shiftlock

import (
	"context"
	"sync"
	"sync/atomic"

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

	mu      sync.Mutex // guards the fields below it when a guard is pending
	token   uint64
	done    bool // Release was called
	pending bool // granted by owner recognition; the lock itself is still on its way
	early   bool // released while pending: release the lock as soon as it arrives
	lost    bool // a pending wait that ended without the lock (recovery, fabric failure)
	// onWay mirrors pending && !lost for Pending, which every grant the
	// proxy records asks; written under mu, read without it.
	onWay atomic.Bool

	// Writer state, passed along the queue (Algorithm 2's return values).
	self    Tail
	ch      <-chan rdma.Message
	curRel  uint64 // RelCnt as of this grant
	consWrt uint32 // writer grants in a row before this one
	epoch   uint64 // the entry's epoch while this writer holds it
	succ    Tail   // stashed Successor, if it arrived early
	hasSucc bool
	tag     uint64 // this writer's owner tag (owner.go)
	own     *owner // its recognition state (Config.OwnerTags): ownBuf
	ownBuf  owner  // allocated with the guard, since every tagged writer has one
	same    bool   // a same-owner answer has arrived
	granted uint8  // how the grant came: msgHandover, msgModeChanged, or 0
	// maybeLag: RelCnt may lag behind curRel, bumps of pipelined handovers
	// being in flight (flagBumpsInFlight). lagging: the closing CAS found
	// it so, and releaseSlow must wait and close again.
	maybeLag, lagging bool
	waited            bool // the acquisition had to wait for the lock
}

// Waited reports whether the acquisition had to wait: behind a writer, or
// for readers to leave, or for its epoch.
func (g *Guard) Waited() bool { return g.waited }

// Token is the fencing token: RelCnt at the grant. It strictly increases per
// entry from one exclusive grant to the next, and every shared grant's token
// lies between those of the exclusive grants before and after it. Shared
// grants of one read phase may share a value. A pending guard's token is the
// one its owner's holding writer was granted; it becomes its own once the
// lock arrives.
func (g *Guard) Token() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.token
}

// Entry is the lock-table index of the lock.
func (g *Guard) Entry() uint64 { return g.entry }

// Mode is the mode the lock is held in.
func (g *Guard) Mode() Mode { return g.mode }

// Pending reports whether g was granted by owner recognition and still waits
// in the queue for the lock itself: the lock is held by a writer with the
// same owner, through another node or another slot (owner.go).
func (g *Guard) Pending() bool { return g.onWay.Load() }

// accept validates a message on the writer's slot; a Successor is stashed.
func (g *Guard) accept(rm rdma.Message) (message, bool) {
	m, err := decode(rm.Payload)
	if err != nil || m.Entry != g.entry {
		g.c.log.Warn("dropping stray notification", zap.Uint64("entry", g.entry), zap.Uint16("from", uint16(rm.From)), zap.Error(err))
		return m, false
	}
	if m.Kind == msgSuccessor {
		g.succ = Tail{Node: rm.From, Target: rdma.Target(m.U32)}
		g.hasSucc = true
	}
	return m, true
}

// Release gives the lock up: a reader with one atomic, a writer with one
// atomic when nobody queued behind it, else by handing over to its successor.
// Releasing a pending guard returns at once; its place in the queue is
// passed on as soon as the lock reaches it.
func (g *Guard) Release(ctx context.Context) error {
	if !g.letGoOnce() {
		return nil
	}
	if g.mode == Shared {
		return g.c.releaseShared(ctx, g)
	}
	return g.c.releaseExclusive(ctx, g)
}

// letGoOnce marks g released and reports whether the lock itself must now
// be released: not if it was released already, nor if g is pending (its
// place in the queue then passes the lock on as soon as it arrives).
func (g *Guard) letGoOnce() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return false
	}
	g.done = true
	// From the moment its owner lets go, the slot stops answering for it,
	// even though passing the lock on may take a while yet.
	g.letGo()
	if !g.pending {
		return true
	}
	if g.early = !g.lost; g.early {
		// Like an abandoned wait: the entry looks held until the lock has
		// passed through this place in the queue.
		g.c.holds.abandon(g.entry, 1)
	}
	return false
}
