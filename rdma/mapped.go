package rdma

import (
	"fmt"
	"syscall"
	"unsafe"
)

// NewMappedMemory is NewMemory for a large region most of which may never
// be touched (a memory node's pool of range-lock trees): its words are
// mapped from the OS, outside the Go heap. In the heap, a region counts as
// live data for the garbage collector's goal, so a 90 MB region would let
// 90 MB more garbage pile up between collections in the process that hosts
// it; mapped, it takes memory only where its pages are used. The mapping
// lives as long as the process: verbs may reach a region until then.
func NewMappedMemory(id RegionID, name string, size uint64) (*Memory, error) {
	if size%16 != 0 {
		return nil, fmt.Errorf("rdma: region %q size %d is not a multiple of 16", name, size)
	}
	if size == 0 || size > 1<<46 {
		return nil, fmt.Errorf("rdma: region %q size %d cannot be mapped", name, size)
	}
	b, err := syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("rdma: mapping region %q of %d bytes: %w", name, size, err)
	}
	words := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), size/8)
	return &Memory{id: id, name: name, words: words, locks: new([stripes]stripe)}, nil
}
