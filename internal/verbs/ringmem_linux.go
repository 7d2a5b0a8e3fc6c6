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
	// spareIdle is how long kept memory may lie unused before it is
	// unmapped.
	spareIdle = 10 * time.Second
)

var spare struct {
	mu sync.Mutex
	// Guarded by mu.
	bySize map[int][]spareMem // kept mappings by length, the newest last
	bytes  int                // their total length
	trim   *time.Timer        // the next trim, nil when none is kept
}

// spareMem is a kept mapping and when it was kept.
type spareMem struct {
	mem  []byte
	kept time.Time
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
	s := kept[len(kept)-1]
	spare.bySize[length] = kept[:len(kept)-1]
	spare.bytes -= length
	return s.mem
}

func keepSpare(mem []byte) bool {
	spare.mu.Lock()
	defer spare.mu.Unlock()
	if spare.bytes+len(mem) > maxSpareBytes {
		return false
	}
	if spare.bySize == nil {
		spare.bySize = make(map[int][]spareMem)
	}
	spare.bySize[len(mem)] = append(spare.bySize[len(mem)], spareMem{mem: mem, kept: time.Now()})
	spare.bytes += len(mem)
	if spare.trim == nil {
		spare.trim = time.AfterFunc(spareIdle, trimSpare)
	}
	return true
}

// trimSpare unmaps the kept memory that has lain unused for spareIdle, and
// looks again when the oldest of the rest will have.
func trimSpare() { trimSpareAt(time.Now()) }

// trimSpareAt is trimSpare as if the time were now.
func trimSpareAt(now time.Time) {
	var old [][]byte
	spare.mu.Lock()
	var oldest time.Time
	for size, kept := range spare.bySize {
		// Kept in order, so the old ones come first.
		n := 0
		for n < len(kept) && now.Sub(kept[n].kept) >= spareIdle {
			old = append(old, kept[n].mem)
			spare.bytes -= size
			n++
		}
		kept = kept[n:]
		if len(kept) == 0 {
			delete(spare.bySize, size)
			continue
		}
		spare.bySize[size] = kept
		if oldest.IsZero() || kept[0].kept.Before(oldest) {
			oldest = kept[0].kept
		}
	}
	if spare.trim != nil {
		if oldest.IsZero() {
			spare.trim.Stop()
			spare.trim = nil
		} else {
			spare.trim.Reset(time.Until(oldest.Add(spareIdle)))
		}
	}
	spare.mu.Unlock()
	for _, mem := range old {
		munmap(mem)
	}
}

// spareBytes is the memory kept for reuse, for tests.
func spareBytes() int {
	spare.mu.Lock()
	defer spare.mu.Unlock()
	return spare.bytes
}
