package memnode

import (
	"testing"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// TestAllocBacksEveryRegion: with Config.Alloc, every region lives on the
// memory Alloc returned (which is what a fabric registers with its NIC), so
// a verb through the region is a store into that memory.
func TestAllocBacksEveryRegion(t *testing.T) {
	got := map[rdma.RegionID][]uint64{}
	s := New(Config{Entries: 8, Eras: 4, MaxNodes: 3, RangeBytes: 64, Alloc: func(id rdma.RegionID, size uint64) []uint64 {
		w := make([]uint64, size/8)
		got[id] = w
		return w
	}})
	defer s.Close()
	want := map[rdma.RegionID]int{rdma.RegionLocks: 16, rdma.RegionEras: 4, rdma.RegionNodes: 4 * rdma.NodeSlotSize / 8, rdma.RegionRanges: 8}
	for id, n := range want {
		w := got[id]
		if len(w) != n {
			t.Fatalf("region %d: Alloc gave %d words, want %d", id, len(w), n)
		}
		if _, err := s.Region(id).MaskedFAA64(8, 5, 0); err != nil {
			t.Fatal(err)
		}
		if w[1] != 5 {
			t.Fatalf("region %d: a verb did not land in Alloc's memory (word 1 is %d)", id, w[1])
		}
	}
}
