package shiftlock

import (
	"fmt"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// The 16-byte lock entry of ShiftLock Fig. 3. Word 0 (bits 0..63) holds the
// queue tail and the reader count, word 1 (bits 64..127) the release counter.
// All-zero is a free lock; a free lock may also carry any RelCnt.
var (
	fTarget = rdma.NewField(0, 24)  // DctQpNum: the tail waiter's slot
	fNode   = rdma.NewField(24, 16) // NodeId: the tail waiter's node
	fTail   = rdma.NewField(0, 40)  // TailPtr = NodeId and Target together
	fRdrCnt = rdma.NewField(40, 23)
	fEpoch  = rdma.NewField(63, 1)
	fRelCnt = rdma.NewField(64, 64)

	// boundary stops MaskedFAA carries at every field's top bit, so that
	// adding -1 to RdrCnt never borrows from Epoch and RelCnt wraps alone.
	boundary = rdma.Boundary(fTail, fRdrCnt, fEpoch, fRelCnt)
)

// Entry is a decoded lock entry.
type Entry rdma.U128

// Tail is the queue tail, zero when no writer is queued.
func (e Entry) Tail() Tail {
	v := rdma.U128(e)
	return Tail{Node: rdma.NodeID(fNode.Get(v)), Target: rdma.Target(fTarget.Get(v))}
}

// Readers is RdrCnt: readers holding, plus readers waiting for the epoch to turn.
func (e Entry) Readers() uint64 { return fRdrCnt.Get(rdma.U128(e)) }

// Epoch is the one-bit epoch; readers waiting behind a writer wait for it to flip.
func (e Entry) Epoch() uint64 { return fEpoch.Get(rdma.U128(e)) }

// RelCnt counts releases; grants derive fencing tokens from it.
func (e Entry) RelCnt() uint64 { return fRelCnt.Get(rdma.U128(e)) }

// Free reports whether nobody holds or waits for the lock.
func (e Entry) Free() bool { return e.Tail().IsZero() && e.Readers() == 0 }

func (e Entry) String() string {
	return fmt.Sprintf("{tail=%v readers=%d epoch=%d relcnt=%d}", e.Tail(), e.Readers(), e.Epoch(), e.RelCnt())
}

// Tail names a queued writer: its node and its waiter slot on that node.
type Tail struct {
	Node   rdma.NodeID
	Target rdma.Target
}

// IsZero reports a null tail pointer.
func (t Tail) IsZero() bool { return t.Node == 0 && t.Target == 0 }

func (t Tail) value() rdma.U128 {
	return fNode.Value(uint64(t.Node)).Or(fTarget.Value(uint64(t.Target)))
}

func (t Tail) String() string {
	if t.IsZero() {
		return "null"
	}
	return fmt.Sprintf("%d/%#x", t.Node, uint32(t.Target))
}

// leaped reports whether RelCnt moved so far past base that only a recovery
// (which adds rdma.RecoveryLeap) can explain it. The difference is signed:
// RelCnt may also lag behind what a holder knows it will be, while the bumps
// of pipelined handovers (Config.PipelineBump) are still in flight, and a
// lag is not a leap.
func leaped(now, base uint64) bool { return int64(now-base) >= rdma.RecoveryLeap/2 }

// behind reports whether RelCnt is short of want by a lag that bumps in
// flight can explain (less than half a recovery's leap).
func behind(now, want uint64) bool {
	d := int64(want - now)
	return d > 0 && d < rdma.RecoveryLeap/2
}

// MaxReaders is how many readers may hold or wait for one entry. RdrCnt has
// 23 bits, and one reader more than it holds would carry it to zero: the
// entry would read as free with every reader inside. A reader's FAA adds
// before it can look, so the limit is half the field: past it a reader
// backs out (ErrTooManyReaders), and the increments in flight from every
// node at once would have to number 2^22 to reach the top.
const MaxReaders = 1 << 22
