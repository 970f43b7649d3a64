// Package wire is the byte layout shared by the two fabrics that carry
// memory verbs as messages: tcpfab's frames (rdma/tcpfab/PROTOCOL.md) and
// the verbs fabric's CPU requests (rdma/verbs). Both encode a verb the same
// way, little-endian: a fixed part (verb, flags, region, offset), then its
// operands, 8 bytes each or 16 for a 16-byte atomic; and a result as a
// status byte and the value. What differs stays with each fabric: framing,
// error encoding, limits, and the checks a decoded verb must pass, whose
// error texts are each fabric's own.
package wire

import (
	"encoding/binary"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

const (
	// OpFixed is the size of a verb's fixed part: verb, flags, region, offset.
	OpFixed = 12
	// FlagWide marks a 16-byte atomic.
	FlagWide = 1
	// StatusOK and StatusErr start an op's result.
	StatusOK  = 0
	StatusErr = 1
)

// Decoder reads little-endian fields from a message. The first short read
// sets Err to Short and makes every later read return zero, so decoding
// code checks once, at the end.
type Decoder struct {
	B     []byte
	Err   error
	Short error // what a short read sets Err to: each fabric words its own
}

// Take returns the next n bytes, capped so that an append to them cannot
// overwrite the rest of the message.
func (d *Decoder) Take(n int) []byte {
	if d.Err != nil {
		return nil
	}
	if n < 0 || n > len(d.B) {
		d.Err = d.Short
		d.B = nil
		return nil
	}
	p := d.B[:n:n]
	d.B = d.B[n:]
	return p
}

func (d *Decoder) U8() uint8 {
	if p := d.Take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *Decoder) U16() uint16 {
	if p := d.Take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (d *Decoder) U32() uint32 {
	if p := d.Take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (d *Decoder) U64() uint64 {
	if p := d.Take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

// U128 reads 16 bytes, the low word first.
func (d *Decoder) U128() rdma.U128 { return rdma.U128{Lo: d.U64(), Hi: d.U64()} }

// Operand reads an atomic's operand: 16 bytes if wide, else 8.
func (d *Decoder) Operand(wide bool) rdma.U128 {
	if wide {
		return d.U128()
	}
	return rdma.U64(d.U64())
}

// Str reads a string behind its u16 length.
func (d *Decoder) Str() string { return string(d.Take(int(d.U16()))) }

// Done fails on an earlier short read, or, with trailing's error, on bytes
// left over: a message must be exactly its contents.
func (d *Decoder) Done(trailing func(n int) error) error {
	if d.Err == nil && len(d.B) != 0 {
		d.Err = trailing(len(d.B))
	}
	return d.Err
}

// AppendU128 appends v, the low word first.
func AppendU128(b []byte, v rdma.U128) []byte {
	b = binary.LittleEndian.AppendUint64(b, v.Lo)
	return binary.LittleEndian.AppendUint64(b, v.Hi)
}

// AppendOperand appends an atomic's operand: 16 bytes if wide, else 8.
func AppendOperand(b []byte, v rdma.U128, wide bool) []byte {
	b = binary.LittleEndian.AppendUint64(b, v.Lo)
	if wide {
		b = binary.LittleEndian.AppendUint64(b, v.Hi)
	}
	return b
}

// AppendOp appends op (a memory verb) with flags: the fixed part, then a
// Read's length, a Write's length and data, or an atomic's operands
// (compare, compare mask, value, mask for a CAS; value, mask for a FAA).
// The caller chooses the flags, since the fabrics differ on a wide Read.
func AppendOp(b []byte, op *rdma.Op, flags uint8) []byte {
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
		b = AppendOperand(b, op.Compare, op.Wide)
		b = AppendOperand(b, op.CompareMask, op.Wide)
		b = AppendOperand(b, op.Value, op.Wide)
		b = AppendOperand(b, op.Mask, op.Wide)
	case rdma.VerbFAA, rdma.VerbMaskedFAA:
		b = AppendOperand(b, op.Value, op.Wide)
		b = AppendOperand(b, op.Mask, op.Wide)
	}
	return b
}

// DecodeOpHeader reads an op's fixed part into op and returns its flags,
// which the caller checks before it reads the operands.
func DecodeOpHeader(d *Decoder, op *rdma.Op) (flags uint8) {
	op.Verb = rdma.Verb(d.U8())
	flags = d.U8()
	op.Addr.Region = rdma.RegionID(d.U16())
	op.Addr.Offset = d.U64()
	return flags
}

// DecodeOperands reads the operands of op's verb, op.Wide set, and returns
// a Read's length; a Write's Buf aliases the message. A verb that is not a
// memory verb has none.
func DecodeOperands(d *Decoder, op *rdma.Op) (readLen uint32) {
	switch op.Verb {
	case rdma.VerbRead:
		return d.U32()
	case rdma.VerbWrite:
		op.Buf = d.Take(int(d.U32()))
	case rdma.VerbCAS, rdma.VerbMaskedCAS:
		op.Compare, op.CompareMask = d.Operand(op.Wide), d.Operand(op.Wide)
		op.Value, op.Mask = d.Operand(op.Wide), d.Operand(op.Wide)
	case rdma.VerbFAA, rdma.VerbMaskedFAA:
		op.Value, op.Mask = d.Operand(op.Wide), d.Operand(op.Wide)
	}
	return 0
}

// AppendResult appends an executed op's success: StatusOK, then a Read's
// data, nothing for a Write, or an atomic's old value.
func AppendResult(b []byte, op *rdma.Op) []byte {
	b = append(b, StatusOK)
	switch op.Verb {
	case rdma.VerbRead:
		return append(b, op.Buf...)
	case rdma.VerbWrite:
		return b
	}
	return AppendOperand(b, op.Old, op.Wide)
}

// DecodeResult reads what follows StatusOK into op: a Read's data into its
// Buf, or an atomic's old value.
func DecodeResult(d *Decoder, op *rdma.Op) {
	switch op.Verb {
	case rdma.VerbRead:
		if p := d.Take(len(op.Buf)); p != nil {
			copy(op.Buf, p)
		}
	case rdma.VerbWrite:
	default:
		op.Old = d.Operand(op.Wide)
	}
}

// AppendStr appends s behind its u16 length, cut to the 65535 bytes a
// length can say.
func AppendStr(b []byte, s string) []byte {
	if len(s) > 1<<16-1 {
		s = s[:1<<16-1]
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}
