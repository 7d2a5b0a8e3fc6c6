package verbs

import (
	"errors"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMapMemoryKeepsNoTable: region memory is zeroed, writable, and
// unknown to unix.Munmap's process-wide table (which answers EINVAL for
// it), so that releasing it never waits on that table's lock; it unmaps
// whole, from many goroutines at once.
func TestMapMemoryKeepsNoTable(t *testing.T) {
	page := os.Getpagesize()
	mems := make([][]byte, 16)
	for i := range mems {
		mem, err := mapMemory(3 * page)
		if err != nil {
			t.Fatal(err)
		}
		if len(mem) != 3*page || cap(mem) != 3*page {
			t.Fatalf("mapped %d bytes (capacity %d), want %d", len(mem), cap(mem), 3*page)
		}
		for j, b := range mem {
			if b != 0 {
				t.Fatalf("byte %d of a new mapping is %d", j, b)
			}
		}
		mem[0], mem[len(mem)-1] = 1, 2
		mems[i] = mem
	}
	if err := unix.Munmap(mems[0]); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("unix.Munmap of region memory: %v, want EINVAL (a mapping its table does not know)", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(mems))
	for i, mem := range mems {
		wg.Go(func() { errs[i] = unmapMemory(mem) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
