package verbs

import (
	"errors"
	"os"
	"sync"
	"testing"
	"time"

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

// TestSpareMemoryReusedZeroedAndBounded: released region memory comes back
// for the next region of its length, zeroed; past maxSpareBytes it is
// unmapped; and a trim unmaps each mapping once it has lain unused for
// spareIdle, not before.
func TestSpareMemoryReusedZeroedAndBounded(t *testing.T) {
	trimAll := func() { trimSpareAt(time.Now().Add(spareIdle)) }
	trimAll()
	if n := spareBytes(); n != 0 {
		t.Fatalf("%d spare bytes kept after trimming all", n)
	}
	page := os.Getpagesize()
	mem, err := mapMemory(5 * page)
	if err != nil {
		t.Fatal(err)
	}
	for i := range mem {
		mem[i] = 0xa5
	}
	if err := unmapMemory(mem); err != nil {
		t.Fatal(err)
	}
	if n := spareBytes(); n != 5*page {
		t.Fatalf("%d spare bytes after releasing %d", n, 5*page)
	}
	again, err := mapMemory(5 * page)
	if err != nil {
		t.Fatal(err)
	}
	if &again[0] != &mem[0] {
		t.Errorf("a region of the same length was mapped anew, not reused")
	}
	for i, b := range again {
		if b != 0 {
			t.Fatalf("byte %d of reused memory is %#x, want 0", i, b)
		}
	}
	// Fill the spare memory to its bound with one mapping, then release
	// one more: it is unmapped, not kept.
	big, err := mapMemory(maxSpareBytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := unmapMemory(big); err != nil {
		t.Fatal(err)
	}
	if err := unmapMemory(again); err != nil {
		t.Fatal(err)
	}
	if n := spareBytes(); n != maxSpareBytes {
		t.Fatalf("%d spare bytes, want the bound %d", n, maxSpareBytes)
	}
	trimAll()
	if n := spareBytes(); n != 0 {
		t.Fatalf("%d spare bytes kept after trimming all", n)
	}
}

// TestSpareMemoryTrimmedByAge: a trim unmaps the mappings kept spareIdle
// ago or earlier and keeps the younger ones, of the same length.
func TestSpareMemoryTrimmedByAge(t *testing.T) {
	trimSpareAt(time.Now().Add(spareIdle))
	page := os.Getpagesize()
	var mems [2][]byte
	for i := range mems {
		m, err := mapMemory(3 * page)
		if err != nil {
			t.Fatal(err)
		}
		mems[i] = m
	}
	for _, m := range mems {
		if err := unmapMemory(m); err != nil {
			t.Fatal(err)
		}
	}
	spare.mu.Lock()
	kept := append([]spareMem(nil), spare.bySize[3*page]...)
	spare.mu.Unlock()
	if len(kept) != 2 {
		t.Fatalf("%d mappings kept, want 2", len(kept))
	}
	// As if the younger had lain unused a nanosecond less than spareIdle.
	trimSpareAt(kept[1].kept.Add(spareIdle - 1))
	want := 3 * page
	if !kept[0].kept.Before(kept[1].kept) {
		want = 2 * 3 * page // kept in the same nanosecond: both are as young
	}
	if n := spareBytes(); n != want {
		t.Errorf("%d spare bytes after the older one's time, want %d", n, want)
	}
	trimSpareAt(time.Now().Add(spareIdle))
	if n := spareBytes(); n != 0 {
		t.Errorf("%d spare bytes kept after trimming all", n)
	}
}
