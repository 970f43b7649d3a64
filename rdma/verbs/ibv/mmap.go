package ibv

import (
	"fmt"
	"syscall"
	"unsafe"
)

// Mmap returns size bytes of zeroed, page-aligned anonymous memory outside
// Go's heap: what a device may be given to read and write after a call
// returns, which Go memory may not be (cgo's pointer rules).
func Mmap(size int) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return b, nil
}

// Munmap releases memory from Mmap.
func Munmap(b []byte) error { return syscall.Munmap(b) }

// Words views b (8-byte aligned, a multiple of 8 bytes) as 8-byte words.
func Words(b []byte) []uint64 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}
