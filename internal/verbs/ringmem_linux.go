package verbs

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Memory for registered regions, outside the Go heap.
//
// unix.Mmap and unix.Munmap keep every mapping in one process-wide table
// behind one mutex, held across the munmap system call: connections that
// release their rings at once (many failing together) would unmap one at
// a time. The regions are mapped and unmapped with MmapPtr and MunmapPtr,
// which keep no table, and each MR remembers its own mapping.

// mapMemory maps length bytes of zeroed anonymous memory, readable and
// writable; length is a whole number of pages.
func mapMemory(length int) ([]byte, error) {
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), length), nil
}

// unmapMemory unmaps what mapMemory returned, all of it.
func unmapMemory(mem []byte) error {
	return unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(mem)), uintptr(len(mem)))
}
