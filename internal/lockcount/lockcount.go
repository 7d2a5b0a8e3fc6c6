// Package lockcount counts how many times a process takes rnet's mutexes, so
// that a benchmark can report locks per operation beside cgo crossings.
//
// Mutex and RWMutex are sync's with counting Lock, RLock and TryLock methods.
// Counting is compiled in only with the rnet_lockcount build tag; without it
// Enabled is false, the methods inline to sync's, and Taken stays 0:
//
//	go test -tags rnet_lockcount -bench PingPongPoll ./benchmarks
//
// Only the mutexes declared with these types are counted, not the runtime's
// or the standard library's.
package lockcount

import (
	"sync"
	"sync/atomic"
)

// taken counts the acquisitions of every Mutex and RWMutex in the process.
var taken atomic.Uint64

// Taken returns how many times a Mutex or RWMutex has been acquired in this
// process (write or read), or 0 when built without the rnet_lockcount tag.
func Taken() uint64 { return taken.Load() }

// Mutex is a sync.Mutex whose acquisitions are counted when Enabled.
type Mutex struct {
	sync.Mutex
}

// Lock locks m as sync.Mutex.Lock does.
func (m *Mutex) Lock() {
	if Enabled {
		taken.Add(1)
	}
	m.Mutex.Lock()
}

// TryLock tries to lock m as sync.Mutex.TryLock does; a success counts.
func (m *Mutex) TryLock() bool {
	ok := m.Mutex.TryLock()
	if Enabled && ok {
		taken.Add(1)
	}
	return ok
}

// RWMutex is a sync.RWMutex whose acquisitions, read or write, are counted
// when Enabled.
type RWMutex struct {
	sync.RWMutex
}

// Lock locks rw for writing as sync.RWMutex.Lock does.
func (rw *RWMutex) Lock() {
	if Enabled {
		taken.Add(1)
	}
	rw.RWMutex.Lock()
}

// RLock locks rw for reading as sync.RWMutex.RLock does.
func (rw *RWMutex) RLock() {
	if Enabled {
		taken.Add(1)
	}
	rw.RWMutex.RLock()
}

// TryLock tries to lock rw for writing; a success counts.
func (rw *RWMutex) TryLock() bool {
	ok := rw.RWMutex.TryLock()
	if Enabled && ok {
		taken.Add(1)
	}
	return ok
}

// TryRLock tries to lock rw for reading; a success counts.
func (rw *RWMutex) TryRLock() bool {
	ok := rw.RWMutex.TryRLock()
	if Enabled && ok {
		taken.Add(1)
	}
	return ok
}
