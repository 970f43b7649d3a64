package rdma

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
)

// stripes is the number of locks that serialise atomics in a Memory. An
// atomic takes the lock of its 16-byte entry's stripe, so independent entries
// proceed in parallel and a 16-byte atomic is never torn by an 8-byte one.
// Real RNICs serialise atomics on a hash of the address in the same way.
const stripes = 1 << 12

type stripe struct {
	sync.Mutex
	_ [56]byte // keep neighbouring stripes off each other's cache line
}

// Memory is a registered region: the memory a memory node exposes to
// one-sided verbs. Every fabric executes verbs through it, which is what makes
// the fabrics agree on semantics. Atomics are serialised per 16-byte entry,
// and Reads and Writes are atomic per aligned 16-byte entry they cover (an
// RNIC's cache-line-sized PCIe reads behave so in practice), so a reader never
// sees half of an atomic's effect on an entry.
type Memory struct {
	id    RegionID
	name  string
	words []uint64
	locks *[stripes]stripe
}

// NewMemory registers a zeroed region of size bytes; size must be a multiple
// of 16.
func NewMemory(id RegionID, name string, size uint64) *Memory {
	if size%16 != 0 {
		panic(fmt.Sprintf("rdma: region %q size %d is not a multiple of 16", name, size))
	}
	return &Memory{id: id, name: name, words: make([]uint64, size/8), locks: new([stripes]stripe)}
}

// NewMemoryOn registers a region on words, which the caller allocated
// zeroed: memory that a NIC can be given. rdma/verbs registers regions with
// an RDMA device, which needs memory outside Go's heap (the device keeps
// writing it after any call returns). len(words) must be even, so that the
// region is whole 16-byte entries.
func NewMemoryOn(id RegionID, name string, words []uint64) *Memory {
	if len(words)%2 != 0 {
		panic(fmt.Sprintf("rdma: region %q of %d words is not whole 16-byte entries", name, len(words)))
	}
	return &Memory{id: id, name: name, words: words, locks: new([stripes]stripe)}
}

func (m *Memory) ID() RegionID     { return m.id }
func (m *Memory) Name() string     { return m.name }
func (m *Memory) Size() uint64     { return uint64(len(m.words)) * 8 }
func (m *Memory) Info() RegionInfo { return RegionInfo{ID: m.id, Name: m.name, Size: m.Size()} }

// check validates an access of n bytes at off with the given alignment.
func (m *Memory) check(off, n, align uint64) error {
	if off%align != 0 || n%8 != 0 {
		return fmt.Errorf("%w: region %d offset %#x length %d (need %d-byte alignment)", ErrMisaligned, m.id, off, n, align)
	}
	if off > m.Size() || n > m.Size()-off {
		return fmt.Errorf("%w: region %d offset %#x length %d size %d", ErrOutOfBounds, m.id, off, n, m.Size())
	}
	return nil
}

func (m *Memory) lock(off uint64) *stripe { return &m.locks[(off/16)%stripes] }

// Read copies len(p) bytes at off into p.
func (m *Memory) Read(off uint64, p []byte) error {
	if err := m.check(off, uint64(len(p)), 8); err != nil {
		return err
	}
	m.chunks(off, len(p), func(w uint64, i int) {
		binary.LittleEndian.PutUint64(p[i:], atomic.LoadUint64(&m.words[w]))
	})
	return nil
}

// chunks calls f for every word of [off, off+n), holding the stripe lock of
// each 16-byte entry while f runs on that entry's words.
func (m *Memory) chunks(off uint64, n int, f func(word uint64, i int)) {
	for i := 0; i < n; {
		l := m.lock(off)
		l.Lock()
		for {
			f(off/8, i)
			off += 8
			i += 8
			if i >= n || off%16 == 0 {
				break
			}
		}
		l.Unlock()
	}
}

// Write copies p to off.
func (m *Memory) Write(off uint64, p []byte) error {
	if err := m.check(off, uint64(len(p)), 8); err != nil {
		return err
	}
	m.chunks(off, len(p), func(w uint64, i int) {
		atomic.StoreUint64(&m.words[w], binary.LittleEndian.Uint64(p[i:]))
	})
	return nil
}

// Load8 reads one word; a convenience for the memory node's own CPU.
func (m *Memory) Load8(off uint64) (uint64, error) {
	if err := m.check(off, 8, 8); err != nil {
		return 0, err
	}
	return atomic.LoadUint64(&m.words[off/8]), nil
}

// MaxWord returns the largest of the words at off, off+stride, off+2*stride
// and so on to the region's end: a memory node's scan of its own table (the
// RelCnt high-water mark it saves), which reads a word of every entry of a
// million and would pay Load8's checks and call on each. Every word is read
// atomically; the scan as a whole is not a snapshot.
func (m *Memory) MaxWord(off, stride uint64) (uint64, error) {
	if stride == 0 || stride%8 != 0 {
		return 0, fmt.Errorf("%w: region %d stride %d (need a positive multiple of 8)", ErrMisaligned, m.id, stride)
	}
	if err := m.check(off, 8, 8); err != nil {
		return 0, err
	}
	var hi uint64
	step := int(stride / 8)
	for i := int(off / 8); i < len(m.words); i += step {
		if v := atomic.LoadUint64(&m.words[i]); v > hi {
			hi = v
		}
	}
	return hi, nil
}

// MaskedCAS64 executes an 8-byte masked compare-and-swap.
func (m *Memory) MaskedCAS64(off, cmp, cmpMask, swap, swapMask uint64) (uint64, error) {
	if err := m.check(off, 8, 8); err != nil {
		return 0, err
	}
	l := m.lock(off)
	l.Lock()
	w := &m.words[off/8]
	old := atomic.LoadUint64(w)
	if next, ok := ApplyMaskedCAS64(old, cmp, cmpMask, swap, swapMask); ok && next != old {
		atomic.StoreUint64(w, next)
	}
	l.Unlock()
	return old, nil
}

// MaskedFAA64 executes an 8-byte field-wise fetch-and-add.
func (m *Memory) MaskedFAA64(off, add, boundary uint64) (uint64, error) {
	if err := m.check(off, 8, 8); err != nil {
		return 0, err
	}
	l := m.lock(off)
	l.Lock()
	w := &m.words[off/8]
	old := atomic.LoadUint64(w)
	atomic.StoreUint64(w, ApplyMaskedFAA64(old, add, boundary))
	l.Unlock()
	return old, nil
}

// MaskedCAS128 executes a 16-byte masked compare-and-swap.
func (m *Memory) MaskedCAS128(off uint64, cmp, cmpMask, swap, swapMask U128) (U128, error) {
	if err := m.check(off, 16, 16); err != nil {
		return U128{}, err
	}
	l := m.lock(off)
	l.Lock()
	lo, hi := &m.words[off/8], &m.words[off/8+1]
	old := U128{atomic.LoadUint64(lo), atomic.LoadUint64(hi)}
	if next, ok := ApplyMaskedCAS(old, cmp, cmpMask, swap, swapMask); ok {
		if next.Lo != old.Lo {
			atomic.StoreUint64(lo, next.Lo)
		}
		if next.Hi != old.Hi {
			atomic.StoreUint64(hi, next.Hi)
		}
	}
	l.Unlock()
	return old, nil
}

// MaskedFAA128 executes a 16-byte field-wise fetch-and-add.
func (m *Memory) MaskedFAA128(off uint64, add, boundary U128) (U128, error) {
	if err := m.check(off, 16, 16); err != nil {
		return U128{}, err
	}
	l := m.lock(off)
	l.Lock()
	lo, hi := &m.words[off/8], &m.words[off/8+1]
	old := U128{atomic.LoadUint64(lo), atomic.LoadUint64(hi)}
	next := ApplyMaskedFAA(old, add, boundary)
	atomic.StoreUint64(lo, next.Lo)
	atomic.StoreUint64(hi, next.Hi)
	l.Unlock()
	return old, nil
}

// Exec executes one Op against m, filling op.Old and returning op.Err. It is
// the generic path that fabrics use for batches and wire requests.
func (m *Memory) Exec(op *Op) error {
	var err error
	switch op.Verb {
	case VerbRead:
		err = m.Read(op.Addr.Offset, op.Buf)
	case VerbWrite:
		err = m.Write(op.Addr.Offset, op.Buf)
	case VerbCAS, VerbMaskedCAS:
		if op.Wide {
			op.Old, err = m.MaskedCAS128(op.Addr.Offset, op.Compare, op.CompareMask, op.Value, op.Mask)
		} else {
			op.Old.Lo, err = m.MaskedCAS64(op.Addr.Offset, op.Compare.Lo, op.CompareMask.Lo, op.Value.Lo, op.Mask.Lo)
		}
	case VerbFAA, VerbMaskedFAA:
		if op.Wide {
			op.Old, err = m.MaskedFAA128(op.Addr.Offset, op.Value, op.Mask)
		} else {
			op.Old.Lo, err = m.MaskedFAA64(op.Addr.Offset, op.Value.Lo, op.Mask.Lo)
		}
	default:
		err = fmt.Errorf("%w: verb %v is not a memory verb", ErrBadRequest, op.Verb)
	}
	op.Err = err
	return err
}
