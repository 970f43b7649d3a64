package rdma

import (
	"math/rand/v2"
	"testing"
)

// The reference model works one bit at a time, with none of the word tricks
// the real code uses, so that the two can disagree.

func refBit(v U128, i int) uint64 {
	if i < 64 {
		return v.Lo >> i & 1
	}
	return v.Hi >> (i - 64) & 1
}

func refSetBit(v U128, i int, b uint64) U128 {
	if i < 64 {
		v.Lo = v.Lo&^(1<<i) | b<<i
	} else {
		v.Hi = v.Hi&^(1<<(i-64)) | b<<(i-64)
	}
	return v
}

func refMaskedCAS(old, cmp, cmpMask, swap, swapMask U128, width int) (U128, bool) {
	for i := 0; i < width; i++ {
		if refBit(cmpMask, i) == 1 && refBit(old, i) != refBit(cmp, i) {
			return old, false
		}
	}
	next := old
	for i := 0; i < width; i++ {
		if refBit(swapMask, i) == 1 {
			next = refSetBit(next, i, refBit(swap, i))
		}
	}
	return next, true
}

// refMaskedFAA adds bit-serially with a ripple carry that is reset after every
// boundary bit and after the top bit.
func refMaskedFAA(old, add, boundary U128, width int) U128 {
	var out U128
	carry := uint64(0)
	for i := 0; i < width; i++ {
		s := refBit(old, i) + refBit(add, i) + carry
		out = refSetBit(out, i, s&1)
		carry = s >> 1
		if refBit(boundary, i) == 1 {
			carry = 0
		}
	}
	return out
}

// randomBoundary draws field layouts, including fields that straddle bit 64.
func randomBoundary(r *rand.Rand, width int) U128 {
	var b U128
	switch r.IntN(4) {
	case 0: // none
	case 1: // a field ending just across the word boundary
		b = refSetBit(b, 64+r.IntN(8), 1)
		b = refSetBit(b, 56+r.IntN(8), 1)
	default:
		for i := 0; i < width; i++ {
			if r.IntN(6) == 0 {
				b = refSetBit(b, i, 1)
			}
		}
	}
	if width == 64 {
		b.Hi = 0
	}
	return b
}

// randomValue biases towards all-ones runs so that carries actually ripple.
func randomValue(r *rand.Rand) U128 {
	switch r.IntN(4) {
	case 0:
		return U128{^uint64(0), ^uint64(0)}
	case 1:
		return U128{^uint64(0) << r.IntN(64), r.Uint64() >> r.IntN(64)}
	default:
		return U128{r.Uint64(), r.Uint64()}
	}
}

func TestMaskedFAAMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 200000; n++ {
		old, add, b := randomValue(r), randomValue(r), randomBoundary(r, 128)
		if got, want := ApplyMaskedFAA(old, add, b), refMaskedFAA(old, add, b, 128); got != want {
			t.Fatalf("FAA128(%v + %v, boundary %v) = %v, want %v", old, add, b, got, want)
		}
		b64 := randomBoundary(r, 64).Lo
		if got, want := ApplyMaskedFAA64(old.Lo, add.Lo, b64), refMaskedFAA(old, add, U64(b64), 64).Lo; got != want {
			t.Fatalf("FAA64(%#x + %#x, boundary %#x) = %#x, want %#x", old.Lo, add.Lo, b64, got, want)
		}
	}
}

func TestMaskedCASMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for n := 0; n < 200000; n++ {
		old, swap := randomValue(r), randomValue(r)
		cmpMask, swapMask := randomValue(r), randomValue(r)
		cmp := randomValue(r)
		switch r.IntN(4) {
		case 0: // make the compare succeed
			cmp = old.And(cmpMask).Or(cmp.AndNot(cmpMask))
		case 1: // zero compare mask: a fetch-and-store
			cmpMask = U128{}
		}
		got, gotOK := ApplyMaskedCAS(old, cmp, cmpMask, swap, swapMask)
		want, wantOK := refMaskedCAS(old, cmp, cmpMask, swap, swapMask, 128)
		if got != want || gotOK != wantOK {
			t.Fatalf("CAS128 old=%v cmp=%v/%v swap=%v/%v = %v,%v want %v,%v", old, cmp, cmpMask, swap, swapMask, got, gotOK, want, wantOK)
		}
		g64, ok64 := ApplyMaskedCAS64(old.Lo, cmp.Lo, cmpMask.Lo, swap.Lo, swapMask.Lo)
		w64, wok64 := refMaskedCAS(U64(old.Lo), U64(cmp.Lo), U64(cmpMask.Lo), U64(swap.Lo), U64(swapMask.Lo), 64)
		if g64 != w64.Lo || ok64 != wok64 {
			t.Fatalf("CAS64 mismatch")
		}
	}
}

func TestZeroCompareMaskIsFetchAndStore(t *testing.T) {
	tail := NewField(0, 40)
	old := U128{0xdead_0000_0000_0042 | 0x7, 99}
	next, ok := ApplyMaskedCAS(old, U128{}, U128{}, tail.Value(0x12_345678), tail.Mask())
	if !ok {
		t.Fatal("zero compare mask must always succeed")
	}
	if tail.Get(next) != 0x12_345678 || next.Hi != 99 || next.Lo>>40 != old.Lo>>40 {
		t.Fatalf("fetch-and-store touched bits outside the swap mask: %v -> %v", old, next)
	}
}

func TestCarryStopsAtFieldBoundary(t *testing.T) {
	// Fields as in a ShiftLock entry: the all-ones 23-bit counter wraps to
	// zero without flipping the 1-bit field above it, and a field that
	// straddles the word boundary carries across bit 64 internally.
	rdr := NewField(40, 23)
	epoch := NewField(63, 1)
	rel := NewField(64, 64)
	b := Boundary(rdr, epoch, rel)
	v := rdr.Set(U128{}, 1<<23-1)
	v = ApplyMaskedFAA(v, rdr.Value(1), b)
	if rdr.Get(v) != 0 || epoch.Get(v) != 0 {
		t.Fatalf("carry escaped the field: %v", v)
	}
	// Subtract one from the counter and add one to the 64-bit field in one op.
	v = rdr.Set(U128{}, 5)
	v = ApplyMaskedFAA(v, rdr.Neg(1).Or(rel.Value(1)), b)
	if rdr.Get(v) != 4 || rel.Get(v) != 1 || epoch.Get(v) != 0 {
		t.Fatalf("reader release arithmetic wrong: %v", v)
	}
	straddle := NewField(60, 8) // bits 60..67
	v = straddle.Set(U128{}, 0x0f)
	v = ApplyMaskedFAA(v, straddle.Value(1), Boundary(straddle))
	if straddle.Get(v) != 0x10 || v.Lo>>60 != 0 || v.Hi != 1 {
		t.Fatalf("straddling field add wrong: %v", v)
	}
	v = straddle.Set(U128{}, 0xff)
	v = ApplyMaskedFAA(v, straddle.Value(1), Boundary(straddle))
	if !v.IsZero() {
		t.Fatalf("straddling field must wrap at its own MSB: %v", v)
	}
}

func TestFieldHelpers(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for n := 0; n < 20000; n++ {
		w := uint(1 + r.IntN(64))
		s := uint(r.IntN(int(128 - w + 1)))
		f := NewField(s, w)
		v := randomValue(r)
		x := r.Uint64()
		got := f.Set(v, x)
		for i := 0; i < 128; i++ {
			in := i >= int(s) && i < int(s+w)
			want := refBit(v, i)
			if in {
				want = x >> (i - int(s)) & 1
			}
			if refBit(got, i) != want {
				t.Fatalf("Set field(%d,%d) bit %d wrong", s, w, i)
			}
			if refBit(f.Mask(), i) == 1 != in {
				t.Fatalf("Mask field(%d,%d) bit %d wrong", s, w, i)
			}
		}
		if mask := f.ones(); f.Get(got) != x&mask {
			t.Fatalf("Get after Set: %#x want %#x", f.Get(got), x&mask)
		}
		if f.Get(f.Neg(x).Add(f.Value(x))) != 0 {
			t.Fatalf("Neg is not the additive inverse in field(%d,%d)", s, w)
		}
	}
}

func TestU128Shifts(t *testing.T) {
	v := U128{0x8000_0000_0000_0001, 0x1}
	if got := v.Lsh(1); got != (U128{2, 3}) {
		t.Fatalf("Lsh: %v", got)
	}
	if got := v.Rsh(1); got != (U128{0xc000_0000_0000_0000, 0}) {
		t.Fatalf("Rsh: %v", got)
	}
	if v.Lsh(128) != (U128{}) || v.Rsh(200) != (U128{}) || v.Lsh(64) != (U128{0, v.Lo}) {
		t.Fatal("large shifts")
	}
	b := make([]byte, 16)
	v.PutBytes(b)
	if U128From(b) != v || b[0] != 1 || b[15] != 0 {
		t.Fatal("byte order")
	}
}
