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
)

// message is the payload of every notification. Entry is carried so a slot
// can reject a message meant for another lock. Layout (little-endian):
// [0] kind, [1] flags, [4:8] u32, [8:16] entry, [16:24] value.
type message struct {
	Kind  uint8
	Flags uint8
	U32   uint32 // successor: its Target; handover: consecutive writers
	Entry uint64
	Value uint64 // handover: RelCnt at grant; mode change: expected RelCnt; successor: its owner tag
}

// flagNoReaders on a mode change says no reader was waiting when the epoch
// flipped, so the successor may go ahead without reading RelCnt.
const flagNoReaders = 1

func (m message) encode() rdma.Payload {
	var p rdma.Payload
	p[0] = m.Kind
	p[1] = m.Flags
	binary.LittleEndian.PutUint32(p[4:], m.U32)
	binary.LittleEndian.PutUint64(p[8:], m.Entry)
	binary.LittleEndian.PutUint64(p[16:], m.Value)
	return p
}

func decode(p rdma.Payload) (message, error) {
	m := message{
		Kind:  p[0],
		Flags: p[1],
		U32:   binary.LittleEndian.Uint32(p[4:]),
		Entry: binary.LittleEndian.Uint64(p[8:]),
		Value: binary.LittleEndian.Uint64(p[16:]),
	}
	if m.Kind < msgSuccessor || m.Kind > msgModeChanged {
		return m, fmt.Errorf("shiftlock: unknown message kind %d", m.Kind)
	}
	return m, nil
}
