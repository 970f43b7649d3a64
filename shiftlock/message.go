package shiftlock

import (
	"encoding/binary"
	"fmt"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// Kinds of notification a waiter slot receives (ShiftLock §3.3, §3.5).
const (
	// msgSuccessor: sent by a writer that enqueued behind the slot's writer;
	// it names the successor's slot.
	msgSuccessor = 1
	// msgHandover: the lock passes to the receiving writer directly.
	msgHandover = 2
	// msgModeChanged: the predecessor flipped the epoch to let waiting
	// readers in; the receiver owns the lock once RelCnt reaches Value.
	msgModeChanged = 3
	// msgSameOwner: the lock is held, or waited for ahead of the receiver,
	// by a writer with the receiver's owner tag whose owner has been told it
	// holds it; Value is that writer's token (owner recognition, owner.go).
	msgSameOwner = 4
	// msgOwnerQuery: does the receiving slot, or a writer ahead of it in the
	// queue, carry owner tag Value? The answer goes to the slot named by
	// Node and U32: msgSameOwner if yes; msgNotOwner if no and flagWantNo
	// is set (a try, or a queued writer whose deadline passed: settle).
	msgOwnerQuery = 5
	// msgNotOwner: the queue was walked to its head and nobody vouched for
	// the asked tag is in it.
	msgNotOwner = 6
)

// flagWantNo on an owner query asks for a msgNotOwner when the answer is no.
const flagWantNo = 1

// message is the payload of every notification. Entry is carried so a slot
// can reject a message meant for another lock. Layout (little-endian):
// [0] kind, [1] flags, [2:4] node, [4:8] u32, [8:16] entry, [16:24] value,
// [24] hops.
type message struct {
	Kind  uint8
	Flags uint8
	Hops  uint8       // owner query: how many writers it has passed
	Node  rdma.NodeID // owner query: the asking slot's node
	U32   uint32      // successor, owner query: the asking slot's Target; handover: consecutive writers
	Entry uint64
	Value uint64 // handover: RelCnt at grant; mode change: expected RelCnt; successor, owner query: an owner tag; same owner: a token
}

// flagNoReaders on a mode change says no reader was waiting when the epoch
// flipped, so the successor may go ahead without reading RelCnt.
const flagNoReaders = 1

// flagBumpsInFlight on a handover says RelCnt may still lag behind the
// token it carries: a pipelined bump (Config.PipelineBump) has not landed.
// Bit 1 of a handover's flags is the epoch.
const flagBumpsInFlight = 4

func (m message) encode() rdma.Payload {
	var p rdma.Payload
	p[0] = m.Kind
	p[1] = m.Flags
	binary.LittleEndian.PutUint16(p[2:], uint16(m.Node))
	binary.LittleEndian.PutUint32(p[4:], m.U32)
	binary.LittleEndian.PutUint64(p[8:], m.Entry)
	binary.LittleEndian.PutUint64(p[16:], m.Value)
	p[24] = m.Hops
	return p
}

func decode(p rdma.Payload) (message, error) {
	m := message{
		Kind:  p[0],
		Flags: p[1],
		Node:  rdma.NodeID(binary.LittleEndian.Uint16(p[2:])),
		U32:   binary.LittleEndian.Uint32(p[4:]),
		Entry: binary.LittleEndian.Uint64(p[8:]),
		Value: binary.LittleEndian.Uint64(p[16:]),
		Hops:  p[24],
	}
	if m.Kind < msgSuccessor || m.Kind > msgNotOwner {
		return m, fmt.Errorf("shiftlock: unknown message kind %d", m.Kind)
	}
	return m, nil
}
