package verbs

import (
	"sync"
	"time"
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
//
// Released memory is kept for the next region of its size rather than
// unmapped at once: munmap takes the process's mmap lock for writing,
// which holds up every thread's page faults and every ibv_reg_mr, and a
// hundred connections that resume or reconnect together would each unmap
// and map again (docs/performance.md, "Region memory kept for reuse").

// Bounds of the spare memory.
const (
	// maxSpareBytes is the most kept: past it, released memory is unmapped.
	maxSpareBytes = 64 << 20
	// spareIdle is how long spare memory may lie unused before it is
	// unmapped, all of it.
	spareIdle = 10 * time.Second
)

var spare struct {
	mu sync.Mutex
	// Guarded by mu.
	bySize map[int][][]byte // kept mappings by length
	bytes  int              // their total length
	used   bool             // one was kept or taken since the last trim
	trim   *time.Timer      // the next trim, nil when none is kept
}

// mapMemory maps length bytes of zeroed anonymous memory, readable and
// writable, or reuses kept memory of that length, zeroed again so that no
// region sees what another held; length is a whole number of pages.
func mapMemory(length int) ([]byte, error) {
	if mem := takeSpare(length); mem != nil {
		clear(mem)
		return mem, nil
	}
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), length), nil
}

// unmapMemory releases what mapMemory returned, all of it: it is kept for
// reuse while the spare memory is under its bound, else unmapped.
func unmapMemory(mem []byte) error {
	if keepSpare(mem) {
		return nil
	}
	return munmap(mem)
}

func munmap(mem []byte) error {
	return unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(mem)), uintptr(len(mem)))
}

func takeSpare(length int) []byte {
	spare.mu.Lock()
	defer spare.mu.Unlock()
	kept := spare.bySize[length]
	if len(kept) == 0 {
		return nil
	}
	mem := kept[len(kept)-1]
	spare.bySize[length] = kept[:len(kept)-1]
	spare.bytes -= length
	spare.used = true
	return mem
}

func keepSpare(mem []byte) bool {
	spare.mu.Lock()
	defer spare.mu.Unlock()
	if spare.bytes+len(mem) > maxSpareBytes {
		return false
	}
	if spare.bySize == nil {
		spare.bySize = make(map[int][][]byte)
	}
	spare.bySize[len(mem)] = append(spare.bySize[len(mem)], mem)
	spare.bytes += len(mem)
	spare.used = true
	if spare.trim == nil {
		spare.trim = time.AfterFunc(spareIdle, trimSpare)
	}
	return true
}

// trimSpare unmaps the spare memory if none was kept or taken since the
// last trim; else it looks again after spareIdle.
func trimSpare() {
	spare.mu.Lock()
	if spare.used {
		spare.used = false
		spare.trim.Reset(spareIdle)
		spare.mu.Unlock()
		return
	}
	kept := spare.bySize
	spare.bySize, spare.bytes, spare.trim = nil, 0, nil
	spare.mu.Unlock()
	for _, mems := range kept {
		for _, mem := range mems {
			munmap(mem)
		}
	}
}

// spareBytes is the memory kept for reuse, for tests.
func spareBytes() int {
	spare.mu.Lock()
	defer spare.mu.Unlock()
	return spare.bytes
}
