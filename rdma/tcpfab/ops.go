package tcpfab

import (
	"encoding/binary"
	"fmt"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// Verb encoding inside tVerb and tBatch frames; see PROTOCOL.md.

const (
	opFixed = 12 // verb, flags, region, offset
	// minOpSize is the smallest encoded op (a read or an empty write).
	minOpSize = opFixed + 4
	flagWide  = 1

	statusOK  = 0
	statusErr = 1

	// errReserve is the least space an error reply takes (status, mask,
	// text length); every op's reply slot reserves at least that much, so a
	// reply never outgrows MaxFrame.
	errReserve = 1 + 4
)

// operandSize is the size of an op's operands after the fixed part, not
// counting a Write's data.
func operandSize(v rdma.Verb, wide bool) int {
	switch v {
	case rdma.VerbRead, rdma.VerbWrite:
		return 4
	case rdma.VerbCAS, rdma.VerbMaskedCAS:
		if wide {
			return 64
		}
		return 32
	case rdma.VerbFAA, rdma.VerbMaskedFAA:
		if wide {
			return 32
		}
		return 16
	}
	return -1
}

// opReqSize is the encoded size of op in a request, or -1 if op is not a
// memory verb and cannot be encoded.
func opReqSize(op *rdma.Op) int {
	n := operandSize(op.Verb, op.Wide)
	if n < 0 {
		return -1
	}
	if op.Verb == rdma.VerbWrite {
		n += len(op.Buf)
	}
	return opFixed + n
}

// opReplyReserve is the space op's reply may take: its success reply or the
// smallest error reply, whichever is larger. A request whose reserves add up
// past MaxFrame is refused, so the reply always fits.
func opReplyReserve(v rdma.Verb, wide bool, readLen int) int {
	n := 0
	switch v {
	case rdma.VerbRead:
		n = readLen
	case rdma.VerbWrite:
	default:
		n = 8
		if wide {
			n = 16
		}
	}
	return max(1+n, errReserve)
}

func appendOp(b []byte, op *rdma.Op) []byte {
	var flags uint8
	if op.Wide && op.Verb.IsAtomic() { // Memory ignores it on reads and writes
		flags = flagWide
	}
	b = append(b, uint8(op.Verb), flags)
	b = binary.LittleEndian.AppendUint16(b, uint16(op.Addr.Region))
	b = binary.LittleEndian.AppendUint64(b, op.Addr.Offset)
	switch op.Verb {
	case rdma.VerbRead:
		b = binary.LittleEndian.AppendUint32(b, uint32(len(op.Buf)))
	case rdma.VerbWrite:
		b = binary.LittleEndian.AppendUint32(b, uint32(len(op.Buf)))
		b = append(b, op.Buf...)
	case rdma.VerbCAS, rdma.VerbMaskedCAS:
		if op.Wide {
			b = appendU128(b, op.Compare)
			b = appendU128(b, op.CompareMask)
			b = appendU128(b, op.Value)
			b = appendU128(b, op.Mask)
		} else {
			b = binary.LittleEndian.AppendUint64(b, op.Compare.Lo)
			b = binary.LittleEndian.AppendUint64(b, op.CompareMask.Lo)
			b = binary.LittleEndian.AppendUint64(b, op.Value.Lo)
			b = binary.LittleEndian.AppendUint64(b, op.Mask.Lo)
		}
	case rdma.VerbFAA, rdma.VerbMaskedFAA:
		if op.Wide {
			b = appendU128(b, op.Value)
			b = appendU128(b, op.Mask)
		} else {
			b = binary.LittleEndian.AppendUint64(b, op.Value.Lo)
			b = binary.LittleEndian.AppendUint64(b, op.Mask.Lo)
		}
	}
	return b
}

// wireOp is a decoded request op. A Write's Buf aliases the frame body; a
// Read carries only its length until the server points Buf at the reply.
type wireOp struct {
	rdma.Op
	readLen int
}

// decodeOp reads one op. A malformed op poisons d: the frame cannot be
// walked past it.
func decodeOp(d *decoder, op *wireOp) {
	*op = wireOp{}
	v := rdma.Verb(d.u8())
	flags := d.u8()
	op.Verb = v
	op.Wide = flags&flagWide != 0
	op.Addr.Region = rdma.RegionID(d.u16())
	op.Addr.Offset = d.u64()
	if d.err != nil {
		return
	}
	if flags&^flagWide != 0 || operandSize(v, op.Wide) < 0 || (op.Wide && !v.IsAtomic()) {
		d.err = fmt.Errorf("%w: verb %v flags %#x", rdma.ErrBadRequest, v, flags)
		return
	}
	switch v {
	case rdma.VerbRead:
		n := d.u32()
		if n > MaxFrame {
			d.err = fmt.Errorf("%w: read of %d bytes", rdma.ErrBadRequest, n)
			return
		}
		op.readLen = int(n)
	case rdma.VerbWrite:
		op.Buf = d.take(int(d.u32()))
	case rdma.VerbCAS, rdma.VerbMaskedCAS:
		if op.Wide {
			op.Compare, op.CompareMask, op.Value, op.Mask = d.u128(), d.u128(), d.u128(), d.u128()
		} else {
			op.Compare.Lo, op.CompareMask.Lo, op.Value.Lo, op.Mask.Lo = d.u64(), d.u64(), d.u64(), d.u64()
		}
	case rdma.VerbFAA, rdma.VerbMaskedFAA:
		if op.Wide {
			op.Value, op.Mask = d.u128(), d.u128()
		} else {
			op.Value.Lo, op.Mask.Lo = d.u64(), d.u64()
		}
	}
}

// appendOpResult encodes an executed op's reply; errors get at most budget
// bytes of text.
func appendOpResult(b []byte, op *rdma.Op, budget int) []byte {
	if op.Err != nil {
		return appendError(append(b, statusErr), op.Err, budget)
	}
	b = append(b, statusOK)
	switch op.Verb {
	case rdma.VerbRead:
		return append(b, op.Buf...)
	case rdma.VerbWrite:
		return b
	}
	if op.Wide {
		return appendU128(b, op.Old)
	}
	return binary.LittleEndian.AppendUint64(b, op.Old.Lo)
}

// decodeOpResult fills op from its reply. Only a malformed reply is an error;
// the verb's own failure goes to op.Err.
func decodeOpResult(d *decoder, op *rdma.Op) error {
	switch d.u8() {
	case statusOK:
		op.Err = nil
		switch op.Verb {
		case rdma.VerbRead:
			if p := d.take(len(op.Buf)); p != nil {
				copy(op.Buf, p)
			}
		case rdma.VerbWrite:
		default:
			if op.Wide {
				op.Old = d.u128()
			} else {
				op.Old = rdma.U128{Lo: d.u64()}
			}
		}
	case statusErr:
		op.Err = decodeError(d)
	default:
		if d.err == nil {
			d.err = fmt.Errorf("%w: bad op status", rdma.ErrBadRequest)
		}
	}
	return d.err
}
