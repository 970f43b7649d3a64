package rdma

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// U128 is a 16-byte value as the fabric sees it: Lo is the 8-byte word at the
// lower address, Hi the word at the higher one, both little-endian in memory.
// Numerically the value is Hi<<64 | Lo, so bit i of a U128 is bit i of Lo for
// i < 64 and bit i-64 of Hi otherwise. Every mask, field and carry in this
// package uses that one numbering.
type U128 struct{ Lo, Hi uint64 }

// U64 widens x to a U128.
func U64(x uint64) U128 { return U128{Lo: x} }

func (a U128) And(b U128) U128    { return U128{a.Lo & b.Lo, a.Hi & b.Hi} }
func (a U128) Or(b U128) U128     { return U128{a.Lo | b.Lo, a.Hi | b.Hi} }
func (a U128) Xor(b U128) U128    { return U128{a.Lo ^ b.Lo, a.Hi ^ b.Hi} }
func (a U128) AndNot(b U128) U128 { return U128{a.Lo &^ b.Lo, a.Hi &^ b.Hi} }
func (a U128) Not() U128          { return U128{^a.Lo, ^a.Hi} }
func (a U128) IsZero() bool       { return a.Lo|a.Hi == 0 }

// Add returns a+b modulo 2^128.
func (a U128) Add(b U128) U128 {
	lo, c := bits.Add64(a.Lo, b.Lo, 0)
	hi, _ := bits.Add64(a.Hi, b.Hi, c)
	return U128{lo, hi}
}

// Sub returns a-b modulo 2^128.
func (a U128) Sub(b U128) U128 {
	lo, br := bits.Sub64(a.Lo, b.Lo, 0)
	hi, _ := bits.Sub64(a.Hi, b.Hi, br)
	return U128{lo, hi}
}

// Lsh returns a<<n; n >= 128 yields zero.
func (a U128) Lsh(n uint) U128 {
	switch {
	case n == 0:
		return a
	case n >= 128:
		return U128{}
	case n >= 64:
		return U128{0, a.Lo << (n - 64)}
	default:
		return U128{a.Lo << n, a.Hi<<n | a.Lo>>(64-n)}
	}
}

// Rsh returns a>>n; n >= 128 yields zero.
func (a U128) Rsh(n uint) U128 {
	switch {
	case n == 0:
		return a
	case n >= 128:
		return U128{}
	case n >= 64:
		return U128{a.Hi >> (n - 64), 0}
	default:
		return U128{a.Lo>>n | a.Hi<<(64-n), a.Hi >> n}
	}
}

// Bit reports bit i.
func (a U128) Bit(i uint) bool { return !a.Rsh(i).And(U64(1)).IsZero() }

// PutBytes stores a into b[:16] in the fabric's memory order.
func (a U128) PutBytes(b []byte) {
	binary.LittleEndian.PutUint64(b[0:8], a.Lo)
	binary.LittleEndian.PutUint64(b[8:16], a.Hi)
}

// U128From reads a 16-byte value in the fabric's memory order.
func U128From(b []byte) U128 {
	return U128{binary.LittleEndian.Uint64(b[0:8]), binary.LittleEndian.Uint64(b[8:16])}
}

func (a U128) String() string { return fmt.Sprintf("%#016x_%016x", a.Hi, a.Lo) }
