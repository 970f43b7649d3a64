package rdma

// Op is one verb in a Batch. Fabrics read the inputs and fill in Old and Err.
type Op struct {
	Verb Verb
	Wide bool // 16-byte atomic
	Addr Addr
	// Buf is the destination of a Read or the source of a Write.
	Buf []byte
	// Compare/CompareMask are the CAS operands. Value is the CAS swap or the
	// FAA addend; Mask is the CAS swap mask or the FAA boundary. Plain CAS and
	// FAA use all-ones and zero masks respectively.
	Compare, CompareMask, Value, Mask U128

	Old U128
	Err error
}

// A Batch is a list of verbs posted together: one doorbell, one round trip,
// completed in order. The zero Batch is empty and ready to use; Reset lets one
// Batch be reused without allocating.
type Batch struct {
	Ops []Op
}

func (b *Batch) add(op Op) int {
	b.Ops = append(b.Ops, op)
	return len(b.Ops) - 1
}

// Reset empties b, keeping its storage.
func (b *Batch) Reset() { b.Ops = b.Ops[:0] }

// Len is the number of verbs in b.
func (b *Batch) Len() int { return len(b.Ops) }

func (b *Batch) Read(a Addr, p []byte) int  { return b.add(Op{Verb: VerbRead, Addr: a, Buf: p}) }
func (b *Batch) Write(a Addr, p []byte) int { return b.add(Op{Verb: VerbWrite, Addr: a, Buf: p}) }

func (b *Batch) CAS(a Addr, cmp, swap uint64) int {
	all := ^uint64(0)
	return b.add(Op{Verb: VerbCAS, Addr: a, Compare: U64(cmp), CompareMask: U64(all), Value: U64(swap), Mask: U64(all)})
}

func (b *Batch) FAA(a Addr, add uint64) int {
	return b.add(Op{Verb: VerbFAA, Addr: a, Value: U64(add)})
}

func (b *Batch) MaskedCAS64(a Addr, cmp, cmpMask, swap, swapMask uint64) int {
	return b.add(Op{Verb: VerbMaskedCAS, Addr: a, Compare: U64(cmp), CompareMask: U64(cmpMask), Value: U64(swap), Mask: U64(swapMask)})
}

func (b *Batch) MaskedFAA64(a Addr, add, boundary uint64) int {
	return b.add(Op{Verb: VerbMaskedFAA, Addr: a, Value: U64(add), Mask: U64(boundary)})
}

func (b *Batch) MaskedCAS128(a Addr, cmp, cmpMask, swap, swapMask U128) int {
	return b.add(Op{Verb: VerbMaskedCAS, Wide: true, Addr: a, Compare: cmp, CompareMask: cmpMask, Value: swap, Mask: swapMask})
}

func (b *Batch) MaskedFAA128(a Addr, add, boundary U128) int {
	return b.add(Op{Verb: VerbMaskedFAA, Wide: true, Addr: a, Value: add, Mask: boundary})
}

// Old64 is the old value of 8-byte atomic i.
func (b *Batch) Old64(i int) uint64 { return b.Ops[i].Old.Lo }

// Old is the old value of atomic i.
func (b *Batch) Old(i int) U128 { return b.Ops[i].Old }

// Err is verb i's own error (bad address and the like), nil on success.
func (b *Batch) Err(i int) error { return b.Ops[i].Err }

// FirstErr is the first per-verb error in b, or nil.
func (b *Batch) FirstErr() error {
	for i := range b.Ops {
		if b.Ops[i].Err != nil {
			return b.Ops[i].Err
		}
	}
	return nil
}
