package lockcount

import (
	"sync"
	"testing"
)

// counted is what Taken should have grown by after n acquisitions: n with
// the rnet_lockcount tag, nothing without.
func counted(n uint64) uint64 {
	if Enabled {
		return n
	}
	return 0
}

func TestTakenCountsAcquisitions(t *testing.T) {
	var m Mutex
	var rw RWMutex
	steps := []struct {
		name     string
		acquire  func()
		acquired uint64
	}{
		{"Mutex.Lock", func() { m.Lock(); m.Unlock() }, 1},
		{"Mutex.TryLock", func() {
			if !m.TryLock() {
				t.Fatal("TryLock of a free Mutex failed")
			}
			m.Unlock()
		}, 1},
		{"Mutex.TryLock held", func() {
			m.Lock()
			if m.TryLock() {
				t.Fatal("TryLock of a held Mutex succeeded")
			}
			m.Unlock()
		}, 1}, // the Lock, not the failed TryLock
		{"RWMutex.Lock", func() { rw.Lock(); rw.Unlock() }, 1},
		{"RWMutex.RLock twice", func() { rw.RLock(); rw.RLock(); rw.RUnlock(); rw.RUnlock() }, 2},
		{"RWMutex.TryLock", func() {
			if !rw.TryLock() {
				t.Fatal("TryLock of a free RWMutex failed")
			}
			rw.Unlock()
		}, 1},
		{"RWMutex.TryRLock", func() {
			if !rw.TryRLock() {
				t.Fatal("TryRLock of a free RWMutex failed")
			}
			rw.RUnlock()
		}, 1},
		{"RWMutex.TryLock read-held", func() {
			rw.RLock()
			if rw.TryLock() {
				t.Fatal("TryLock of a read-held RWMutex succeeded")
			}
			rw.RUnlock()
		}, 1}, // the RLock, not the failed TryLock
		{"RLocker", func() { l := rw.RLocker(); l.Lock(); l.Unlock() }, 0}, // sync's, not counted
	}
	for _, s := range steps {
		before := Taken()
		s.acquire()
		if got, want := Taken()-before, counted(s.acquired); got != want {
			t.Errorf("%s: Taken grew by %d, want %d (Enabled=%v)", s.name, got, want, Enabled)
		}
	}
}

func TestTakenCountsEveryGoroutine(t *testing.T) {
	const goroutines, each = 4, 1000
	var m Mutex
	var rw RWMutex
	shared := 0
	before := Taken()
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				m.Lock()
				shared++
				m.Unlock()
				rw.RLock()
				rw.RUnlock()
			}
		})
	}
	wg.Wait()
	if shared != goroutines*each {
		t.Fatalf("the Mutex let %d of %d increments through", shared, goroutines*each)
	}
	if got, want := Taken()-before, counted(2*goroutines*each); got != want {
		t.Errorf("Taken grew by %d, want %d (Enabled=%v)", got, want, Enabled)
	}
}

// The pair shows what counting costs: nothing without the tag.
func BenchmarkMutex(b *testing.B) {
	var m Mutex
	for b.Loop() {
		m.Lock()
		m.Unlock()
	}
}

func BenchmarkSyncMutex(b *testing.B) {
	var m sync.Mutex
	for b.Loop() {
		m.Lock()
		m.Unlock()
	}
}
