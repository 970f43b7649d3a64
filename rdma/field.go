package rdma

import "fmt"

// A Field is a run of Width bits starting at bit Shift of a U128 (see U128
// for the bit numbering). Fields may straddle the 64-bit word boundary. They
// are the single place where masks, extraction and insertion are defined, so
// that lock algorithms never shift bits by hand.
type Field struct {
	Shift, Width uint8
}

// NewField returns the field [shift, shift+width). It panics on a field that
// does not fit in 128 bits or is wider than 64 bits, because such a field is
// a programming error in a layout table, not a runtime condition.
func NewField(shift, width uint) Field {
	if width == 0 || width > 64 || shift+width > 128 {
		panic(fmt.Sprintf("rdma: bad field shift=%d width=%d", shift, width))
	}
	return Field{uint8(shift), uint8(width)}
}

func (f Field) ones() uint64 {
	if f.Width == 64 {
		return ^uint64(0)
	}
	return 1<<f.Width - 1
}

// Mask has exactly the field's bits set.
func (f Field) Mask() U128 { return U64(f.ones()).Lsh(uint(f.Shift)) }

// MSB has only the field's most significant bit set; it is the field's
// contribution to a MaskedFAA boundary.
func (f Field) MSB() U128 { return U64(1).Lsh(uint(f.Shift) + uint(f.Width) - 1) }

// Get extracts the field from v.
func (f Field) Get(v U128) uint64 { return v.Rsh(uint(f.Shift)).Lo & f.ones() }

// Value returns a U128 holding x (truncated to the field's width) in the
// field and zero elsewhere: the operand for a masked CAS or FAA.
func (f Field) Value(x uint64) U128 { return U64(x & f.ones()).Lsh(uint(f.Shift)) }

// Set returns v with the field replaced by x.
func (f Field) Set(v U128, x uint64) U128 { return v.AndNot(f.Mask()).Or(f.Value(x)) }

// Neg returns the field operand that subtracts x under MaskedFAA (two's
// complement within the field's width).
func (f Field) Neg(x uint64) U128 { return f.Value(-x) }

// Boundary builds the MaskedFAA boundary for a set of fields: the MSB of each.
func Boundary(fields ...Field) U128 {
	var b U128
	for _, f := range fields {
		b = b.Or(f.MSB())
	}
	return b
}

// MaskOf ORs the masks of fields: a compare or swap mask.
func MaskOf(fields ...Field) U128 {
	var m U128
	for _, f := range fields {
		m = m.Or(f.Mask())
	}
	return m
}

// ApplyMaskedCAS is the masked compare-and-swap every fabric executes: it
// succeeds iff old&cmpMask == cmp&cmpMask, in which case the result is
// (old &^ swapMask) | (swap & swapMask). With cmpMask zero it always
// succeeds, which turns it into a fetch-and-store of the masked bits.
func ApplyMaskedCAS(old, cmp, cmpMask, swap, swapMask U128) (next U128, ok bool) {
	if old.And(cmpMask) != cmp.And(cmpMask) {
		return old, false
	}
	return old.AndNot(swapMask).Or(swap.And(swapMask)), true
}

// ApplyMaskedFAA is the field-wise fetch-and-add every fabric executes. A set
// bit in boundary marks the most significant bit of a field; the carry out of
// that bit is dropped, so each field wraps on its own. Bits above the highest
// boundary form one more field that wraps at bit 127.
//
// It is the classic SWAR add: clearing the boundary bits keeps every carry
// inside its field, and the boundary bits are then restored as the carry-less
// sum (xor) of the operands' boundary bits and the carry that reached them.
func ApplyMaskedFAA(old, add, boundary U128) U128 {
	sum := old.AndNot(boundary).Add(add.AndNot(boundary))
	return sum.Xor(old.Xor(add).And(boundary))
}

// ApplyMaskedCAS64 is ApplyMaskedCAS on one 8-byte word.
func ApplyMaskedCAS64(old, cmp, cmpMask, swap, swapMask uint64) (uint64, bool) {
	if old&cmpMask != cmp&cmpMask {
		return old, false
	}
	return old&^swapMask | swap&swapMask, true
}

// ApplyMaskedFAA64 is ApplyMaskedFAA on one 8-byte word; bit 63 is always
// the top of the last field.
func ApplyMaskedFAA64(old, add, boundary uint64) uint64 {
	return (old&^boundary + add&^boundary) ^ (old^add)&boundary
}
