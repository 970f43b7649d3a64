package tcpfab

import (
	"fmt"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/internal/wire"
)

// Verb encoding inside tVerb and tBatch frames; see PROTOCOL.md.

const (
	opFixed = wire.OpFixed // verb, flags, region, offset
	// minOpSize is the smallest encoded op (a read or an empty write).
	minOpSize = opFixed + 4
	flagWide  = wire.FlagWide

	statusOK  = wire.StatusOK
	statusErr = wire.StatusErr

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
	return wire.AppendOp(b, op, flags)
}

// wireOp is a decoded request op. A Write's Buf aliases the frame body; a
// Read carries only its length until the server points Buf at the reply.
type wireOp struct {
	rdma.Op
	readLen int
}

// decodeOp reads one op. A malformed op poisons d: the frame cannot be
// walked past it.
func decodeOp(d *wire.Decoder, op *wireOp) {
	*op = wireOp{}
	flags := wire.DecodeOpHeader(d, &op.Op)
	v := op.Verb
	op.Wide = flags&flagWide != 0
	if d.Err != nil {
		return
	}
	if flags&^flagWide != 0 || operandSize(v, op.Wide) < 0 || (op.Wide && !v.IsAtomic()) {
		d.Err = fmt.Errorf("%w: verb %v flags %#x", rdma.ErrBadRequest, v, flags)
		return
	}
	n := wire.DecodeOperands(d, &op.Op)
	if v == rdma.VerbRead {
		if n > MaxFrame {
			d.Err = fmt.Errorf("%w: read of %d bytes", rdma.ErrBadRequest, n)
			return
		}
		op.readLen = int(n)
	}
}

// appendOpResult encodes an executed op's reply; errors get at most budget
// bytes of text.
func appendOpResult(b []byte, op *rdma.Op, budget int) []byte {
	if op.Err != nil {
		return appendError(append(b, statusErr), op.Err, budget)
	}
	return wire.AppendResult(b, op)
}

// decodeOpResult fills op from its reply. Only a malformed reply is an error;
// the verb's own failure goes to op.Err.
func decodeOpResult(d *wire.Decoder, op *rdma.Op) error {
	switch d.U8() {
	case statusOK:
		op.Err = nil
		wire.DecodeResult(d, op)
	case statusErr:
		op.Err = decodeError(d)
	default:
		if d.Err == nil {
			d.Err = fmt.Errorf("%w: bad op status", rdma.ErrBadRequest)
		}
	}
	return d.Err
}
