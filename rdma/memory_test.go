package rdma

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"
)

func TestMemoryBoundsAndAlignment(t *testing.T) {
	m := NewMemory(1, "t", 64)
	buf := make([]byte, 8)
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"read past end", m.Read(64, buf), ErrOutOfBounds},
		{"read straddling end", m.Read(60, buf), ErrMisaligned},
		{"read odd length", m.Read(0, make([]byte, 3)), ErrMisaligned},
		{"huge offset", m.Write(^uint64(0)-7, buf), ErrOutOfBounds},
		{"wide atomic at 8", errOf(m.MaskedCAS128(8, U128{}, U128{}, U128{}, U128{})), ErrMisaligned},
		{"narrow atomic misaligned", errOf64(m.MaskedFAA64(4, 1, 0)), ErrMisaligned},
		{"wide atomic past end", errOf(m.MaskedFAA128(64, U128{}, U128{})), ErrOutOfBounds},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.err, c.want)
		}
	}
	if err := m.Read(56, buf); err != nil {
		t.Fatalf("last word must be readable: %v", err)
	}
}

func errOf(_ U128, err error) error     { return err }
func errOf64(_ uint64, err error) error { return err }

func TestMemoryExecMatchesTypedVerbs(t *testing.T) {
	m := NewMemory(1, "t", 32)
	var b Batch
	b.MaskedFAA128(Addr{1, 16}, U128{1, 2}, U128{})
	b.CAS(Addr{1, 0}, 0, 7)
	b.FAA(Addr{1, 0}, 3)
	b.Write(Addr{1, 8}, []byte{9, 0, 0, 0, 0, 0, 0, 0})
	rd := make([]byte, 32)
	b.Read(Addr{1, 0}, rd)
	for i := range b.Ops {
		if err := m.Exec(&b.Ops[i]); err != nil {
			t.Fatal(err)
		}
	}
	if b.Old64(1) != 0 || b.Old64(2) != 7 {
		t.Fatalf("old values: %d %d", b.Old64(1), b.Old64(2))
	}
	if got := U128From(rd[16:]); got != (U128{1, 2}) {
		t.Fatalf("faa128 result %v", got)
	}
	if got := U128From(rd[0:]); got != (U128{10, 9}) {
		t.Fatalf("cas/faa/write result %v", got)
	}
}

func TestMemoryMaskedFAANoLostUpdates(t *testing.T) {
	m := NewMemory(1, "t", 16)
	cnt, rel := NewField(40, 23), NewField(64, 64)
	b := Boundary(cnt, rel)
	const workers, iters = 8, 5000
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < iters; i++ {
				m.MaskedFAA128(0, cnt.Value(1).Or(rel.Value(1)), b)
				m.MaskedFAA128(0, cnt.Neg(1), b)
			}
		}()
	}
	wg.Wait()
	buf := make([]byte, 16)
	m.Read(0, buf)
	v := U128From(buf)
	if cnt.Get(v) != 0 || rel.Get(v) != workers*iters {
		t.Fatalf("lost updates: cnt=%d rel=%d", cnt.Get(v), rel.Get(v))
	}
}

// TestMappedMemory: a mapped region behaves as a heap one.
func TestMappedMemory(t *testing.T) {
	m, err := NewMappedMemory(RegionRanges, "ranges", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if m.Size() != 1<<20 {
		t.Fatalf("size %d", m.Size())
	}
	if old, err := m.MaskedFAA64(1<<20-8, 5, 0); err != nil || old != 0 {
		t.Fatalf("FAA on a fresh mapping: %d %v", old, err)
	}
	var b [16]byte
	if err := m.Read(1<<20-16, b[:]); err != nil || b[8] != 5 {
		t.Fatalf("read back: %v %v", b, err)
	}
	if _, err := NewMappedMemory(RegionRanges, "odd", 24); err == nil {
		t.Fatal("a size that is not a multiple of 16 was mapped")
	}
}

// TestMemoryMaxWord: the scan reads exactly the words of its stride, to the
// region's end, and refuses what Load8 would.
func TestMemoryMaxWord(t *testing.T) {
	m := NewMemory(1, "t", 64) // four 16-byte entries
	for off, v := range map[uint64]uint64{0: 1 << 60, 8: 3, 24: 9, 40: 4, 56: 7, 48: 1 << 61} {
		if err := m.Write(off, le(v)); err != nil {
			t.Fatal(err)
		}
	}
	// The second word of each entry: 3, 9, 4, 7, not the first words' larger values.
	if got, err := m.MaxWord(8, 16); got != 9 || err != nil {
		t.Errorf("MaxWord(8, 16) = %d, %v; want 9", got, err)
	}
	if got, _ := m.MaxWord(40, 16); got != 7 {
		t.Errorf("MaxWord(40, 16) = %d; want 7 (from the offset on)", got)
	}
	if got, _ := m.MaxWord(0, 8); got != 1<<61 {
		t.Errorf("MaxWord(0, 8) = %d; want %d", got, uint64(1<<61))
	}
	for _, c := range []struct {
		off, stride uint64
		want        error
	}{{4, 16, ErrMisaligned}, {8, 0, ErrMisaligned}, {8, 12, ErrMisaligned}, {64, 16, ErrOutOfBounds}} {
		if _, err := m.MaxWord(c.off, c.stride); !errors.Is(err, c.want) {
			t.Errorf("MaxWord(%d, %d): %v, want %v", c.off, c.stride, err, c.want)
		}
	}
}

func le(v uint64) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, v)
	return b
}

// BenchmarkMaxWord is the memory node's RelCnt scan of a million entries.
func BenchmarkMaxWord(b *testing.B) {
	m := NewMemory(1, "t", 16<<20)
	for i := 0; i < b.N; i++ {
		if _, err := m.MaxWord(8, 16); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoad8Scan is the same scan word by word, as it was done before
// MaxWord.
func BenchmarkLoad8Scan(b *testing.B) {
	m := NewMemory(1, "t", 16<<20)
	for i := 0; i < b.N; i++ {
		var max uint64
		for off := uint64(8); off < m.Size(); off += 16 {
			if v, _ := m.Load8(off); v > max {
				max = v
			}
		}
	}
}
