package rdma

import (
	"context"
	"time"
)

// Well-known regions of a memory node. A memory node registers all three;
// Layout tells a joining node their sizes.
const (
	// RegionLocks holds the lock table: 16-byte entries.
	RegionLocks RegionID = 1
	// RegionEras holds the recovery era counters: 8-byte words.
	RegionEras RegionID = 2
	// RegionNodes holds the node table: one NodeSlotSize slot per NodeID,
	// where each node heartbeats with one-sided writes.
	RegionNodes RegionID = 3
	// RegionRanges holds range-lock trees (package rangelock): 16-byte
	// slots, a tree's fencing counter in its first and its nodes after
	// it. A memory node registers it only when configured with room for
	// trees.
	RegionRanges RegionID = 4
)

// NodeSlotSize is the size of one node-table slot. Word 0 is the node's lease
// horizon in milliseconds from its heartbeat, word 1 the heartbeat sequence,
// word 2 the status the memory node writes (SlotDead once declared dead), word
// 3 is reserved. The node writes words 0 and 1 in one Write, horizon first, so
// a reader that sees a new sequence also sees that heartbeat's horizon.
const NodeSlotSize = 32

// Node-slot word offsets and status values. SlotConfirmed is written by a
// memory node that persists its state: the longest horizon (ms) it has
// safely on disk, so that a member relies on a horizon only once the memory
// node would honour it after a restart.
const (
	SlotHorizon   = 0
	SlotSeq       = 8
	SlotStatus    = 16
	SlotConfirmed = 24
	SlotDead      = 1
)

// RegionInfo describes a registered region.
type RegionInfo struct {
	ID   RegionID
	Name string
	Size uint64
}

// Layout is what a node learns about its memory node when it joins.
type Layout struct {
	// Generation changes every time the memory node starts; a node that sees
	// a new generation must rejoin, because the lock table was lost.
	Generation uint64
	Regions    []RegionInfo
	// LockEntries is the number of 16-byte entries in RegionLocks.
	LockEntries uint64
	// EraCount is the number of 8-byte era counters in RegionEras.
	EraCount uint64
	// HeartbeatInterval is how often members write their node-table slot;
	// DeadAfter is how long a silent member has before it is declared dead.
	HeartbeatInterval time.Duration
	DeadAfter         time.Duration
	// MaxLease is the longest TTL a proxy may grant. The memory node counts
	// the lease horizons members publish up to MaxHorizon(MaxLease,
	// DeadAfter), which bounds how long a dead member holds up recovery,
	// and the restart grace.
	MaxLease time.Duration
	// Persistent: the memory node keeps its state across restarts and
	// confirms horizons in SlotConfirmed; members wait for the confirmation
	// before relying on a longer horizon.
	Persistent bool
}

// MaxHorizon is the longest lease horizon a member of a memory node with
// these settings can need to publish, and so the most the memory node
// counts of one: a proxy grants TTLs of at most maxLease and publishes its
// longest TTL, or deadAfter if that is longer, plus deadAfter/4 for the
// time a grant takes (lockmap.Lease). A member that publishes more is
// misbehaving, and counting it would let it hold up recovery, and the next
// generation's restart grace, for as long as it liked.
func MaxHorizon(maxLease, deadAfter time.Duration) time.Duration {
	return max(maxLease, deadAfter) + deadAfter/4
}

// EntryAddr is the address of lock-table entry i.
func (l Layout) EntryAddr(i uint64) Addr { return Addr{RegionLocks, i * 16} }

// EraAddr is the address of the era counter that guards lock entry i. Entries
// are spread over the counters so that recoveries of different entries do not
// queue behind one era (ShiftLock §3.6, "Improving recovery performance").
func (l Layout) EraAddr(entry uint64) Addr {
	if l.EraCount == 0 {
		return Addr{RegionEras, 0}
	}
	return Addr{RegionEras, (entry % l.EraCount) * 8}
}

// NodeSlotAddr is the node-table slot of node n.
func (l Layout) NodeSlotAddr(n NodeID) Addr { return Addr{RegionNodes, uint64(n) * NodeSlotSize} }

// Peer is an entry of the address book: where a node receives Sends.
type Peer struct {
	Node NodeID
	Addr string
}

// JoinRequest is what a node presents when it joins a memory node.
type JoinRequest struct {
	// Name is for logs and metrics.
	Name string
	// Addr is where other nodes reach this node's Sends ("" in-process).
	Addr string
	// From names the host the node joins from, as the fabric sees it (its
	// connection's source, never what the node says), so that the memory
	// node can bound the node IDs one host holds; "" in-process.
	From string
}

// JoinReply assigns the node its ID and gives it the layout and address book.
type JoinReply struct {
	Node   NodeID
	Layout Layout
	Peers  []Peer
}

// RecoverRequest asks the memory node to reset a lock entry whose holder or
// queue predecessor looks dead (ShiftLock §3.6). Era is the value the waiter
// read from the entry's era counter before deciding; a request carrying an
// old era is refused, which is what makes recovery happen once per failure.
type RecoverRequest struct {
	Entry   uint64 // lock-table index
	Era     uint64
	Suspect NodeID // the node the waiter believes blocks it; 0 if unknown
}

// RecoverStatus is the memory node's answer to a RecoverRequest.
type RecoverStatus uint8

const (
	// RecoverDone: the entry was reset and the era bumped.
	RecoverDone RecoverStatus = iota + 1
	// RecoverStale: the era moved on; someone already recovered. Re-read.
	RecoverStale
	// RecoverRefused: not safe (yet), e.g. the suspect is alive or holds the
	// entry. RetryAfter is a hint; a waiter backs off from it, so that a
	// lock held for long does not turn its waiters into a probe storm.
	RecoverRefused
	// RecoverNotYet: nobody alive holds the entry, but a dead node's lease
	// horizon has not passed. RetryAfter is exactly when it will have: ask
	// again then, whatever earlier refusals backed off to.
	RecoverNotYet
)

func (s RecoverStatus) String() string {
	switch s {
	case RecoverDone:
		return "done"
	case RecoverStale:
		return "stale"
	case RecoverRefused:
		return "refused"
	case RecoverNotYet:
		return "not yet"
	}
	return "unknown"
}

// RecoverReply answers a RecoverRequest.
type RecoverReply struct {
	Status     RecoverStatus
	Era        uint64 // the era after the call
	RetryAfter time.Duration
	Reason     string
}

// Control is a node's handle on its memory node's control path. These calls
// use the memory node's CPU, so nothing on a lock's fast path may use them.
type Control interface {
	// Peers returns the current address book.
	Peers(ctx context.Context) ([]Peer, error)
	// Recover asks for an era-guarded reset of a lock entry.
	Recover(ctx context.Context, req RecoverRequest) (RecoverReply, error)
}

// Hold is a node's answer when the memory node probes it about a lock entry
// before a recovery (see docs/recovery-design.md).
type Hold uint8

const (
	// HoldNone: the node has nothing to do with the entry.
	HoldNone Hold = iota
	// HoldWaiting: the node only has queued waiters on the entry; a reset
	// makes them start over, which is safe.
	HoldWaiting
	// HoldActive: the node holds the entry, or has an acquire whose outcome
	// it does not know yet. A reset now could double-grant.
	HoldActive
)

func (h Hold) String() string {
	switch h {
	case HoldNone:
		return "none"
	case HoldWaiting:
		return "waiting"
	case HoldActive:
		return "active"
	}
	return "unknown"
}

// Prober lets a memory node ask a member about an entry. Fabrics provide it
// to the Host they serve (see Host.SetProber).
type Prober interface {
	Probe(ctx context.Context, n NodeID, entry uint64) (Hold, error)
}

// Host is the memory-node side that fabrics serve: registered memory plus the
// control path. memnode implements it; memfab calls it directly and tcpfab
// serves it over the wire.
type Host interface {
	// Region returns a registered region, or nil.
	Region(id RegionID) *Memory
	// Counters count the verbs that arrive at this memory node.
	Counters() *Counters
	Join(req JoinRequest) (JoinReply, error)
	Leave(n NodeID)
	Peers() []Peer
	Recover(ctx context.Context, req RecoverRequest) (RecoverReply, error)
	// Admit is checked before a node's verbs run. It fails (wrapping
	// ErrUnreachable) once the node has left or was declared dead: its
	// access is revoked, as destroying its queue pair would, so a node that
	// wakes up from a long pause cannot touch the table with stale intent.
	Admit(n NodeID) error
	// SetProber gives the host a way to reach members' probe handlers.
	SetProber(p Prober)
}

// ProbeFreeze is how long a node that answered HoldWaiting keeps its waiters
// on the entry from entering by observation. The memory node must finish the
// recovery within it (docs/recovery-design.md).
const ProbeFreeze = time.Second

// RecoveryLeap is what a recovery adds to an entry's release counter (word 1)
// after zeroing its control word (word 0). Waiters that see the counter jump
// by at least RecoveryLeap/2 past what they expect know the entry was reset
// and start over. See docs/recovery-design.md for why it is not 2^63.
const RecoveryLeap = 1 << 40

// Range-lock names (package rangelock through lockmap) are bound to trees
// of RegionRanges by the memory node: each name that has holders or
// waiters gets a tree of its own, from a pool the memory node owns, and
// gives it back when nobody uses it. Binding is a control-path call, made
// when a proxy starts using a name and when it stops: never on a span's
// own acquire or release, which stay one-sided.

// RangeOp is what a RangeRequest asks for.
type RangeOp uint8

const (
	// RangeBind: the sender starts using the name. The reply names its
	// tree; the sender holds one reference until its RangeUnbind.
	RangeBind RangeOp = iota + 1
	// RangeUnbind: the sender stopped using the name on that tree: it
	// holds no span of it and has nothing in flight on it.
	RangeUnbind
	// RangeRepair: a verb of the sender on the tree failed with an
	// outcome it cannot know (a timeout, a broken connection). The memory
	// node rebuilds the tree from what its users hold.
	RangeRepair
)

// RangeNameSize is the size of a name as the memory node sees it: a
// SHA-256 digest of the range lock's key, so that the memory node's
// bookkeeping is bounded whatever the keys' length.
const RangeNameSize = 32

// RangeRequest is a range-name control call.
type RangeRequest struct {
	Op   RangeOp
	Name [RangeNameSize]byte
	// Tree is the tree the name is bound to (RangeUnbind, RangeRepair).
	Tree uint64
}

// RangeStatus is the memory node's answer to a RangeRequest.
type RangeStatus uint8

const (
	// RangeOK: done; for RangeBind, Tree is the name's tree.
	RangeOK RangeStatus = iota + 1
	// RangeFull: every tree is bound to a name in use. Reason says how
	// many there are; the sender must not wait for one to come free.
	RangeFull
	// RangeBusy: the name's tree is being repaired (a user died, or asked
	// for it); ask again after RetryAfter.
	RangeBusy
)

// RangeReply answers a RangeRequest.
type RangeReply struct {
	Status     RangeStatus
	Tree       uint64
	RetryAfter time.Duration
	Reason     string
}

// RangeControl is the control path of range-lock names. A fabric's Control
// implements it when its memory node serves range locks (memfab and
// tcpfab do); a lock layer asks with a type assertion.
type RangeControl interface {
	Range(ctx context.Context, req RangeRequest) (RangeReply, error)
}

// RangeHost is the memory-node side of RangeControl: n is the member that
// asks, as the fabric knows it.
type RangeHost interface {
	Range(ctx context.Context, n NodeID, req RangeRequest) (RangeReply, error)
}

// A repair of a tree reaches its users through the recovery probe
// (Prober.Probe), with an entry no lock entry can have: RangeProbe set, the
// repair's round in bits 56-62, the step in bits 48-55, the tree below.
// Every user answers each step, in order, before the memory node goes on:
//
//   - RangeFreeze: stop every verb on the tree (acquires in flight give up
//     and wait; releases of held spans are only recorded), and answer once
//     nothing of the node's is still on its way to the tree;
//   - RangeReapply: post, in one batch, what the node's held spans put in
//     the tree, which the memory node has just zeroed;
//   - RangeResume: go on; waiting acquires start over.
//
// A user answers HoldNone when the step is done (or it has nothing on the
// tree) and HoldActive when it cannot do it yet (a bind still on its way);
// the memory node then asks again. Each attempt at a repair is a new
// round: a user ignores a step of a round older than the last freeze it
// saw, which a probe that timed out and was handled late could be.
const (
	RangeProbe = uint64(1) << 63

	RangeFreeze  = 1
	RangeReapply = 2
	RangeResume  = 3

	// RangeRounds is how many rounds the entry tells apart.
	RangeRounds = 128
)

// RangeProbeEntry encodes a step of a round of a repair of tree as a
// probe's entry.
func RangeProbeEntry(step uint8, round uint8, tree uint64) uint64 {
	return RangeProbe | uint64(round%RangeRounds)<<56 | uint64(step)<<48 | tree&(1<<48-1)
}

// ParseRangeProbe decodes an entry RangeProbeEntry made; ok is false for a
// probe about a lock entry.
func ParseRangeProbe(entry uint64) (step, round uint8, tree uint64, ok bool) {
	if entry&RangeProbe == 0 {
		return 0, 0, 0, false
	}
	return uint8(entry >> 48), uint8(entry>>56) % RangeRounds, entry & (1<<48 - 1), true
}

// RangeRoundBefore reports whether round a comes before round b, for
// rounds less than RangeRounds/2 apart.
func RangeRoundBefore(a, b uint8) bool {
	d := (b - a) % RangeRounds
	return d != 0 && d < RangeRounds/2
}
