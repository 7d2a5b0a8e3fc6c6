package cm

import (
	"sync/atomic"

	"github.com/rnet-dev/rnet/internal/lockcount"
)

// Events name their id by a handle that rnet stores in the id's context
// field, not by the C pointer: a handle is never reused, while a freed id's
// address may be handed to the next rdma_create_id while an event read just
// before the free is still on its way to Go.
var (
	registryMu lockcount.Mutex
	registry   = map[uintptr]*ID{}
	nextHandle atomic.Uintptr
)

func register(id *ID) uintptr {
	h := nextHandle.Add(1)
	registryMu.Lock()
	registry[h] = id
	registryMu.Unlock()
	return h
}

func unregister(h uintptr) {
	registryMu.Lock()
	delete(registry, h)
	registryMu.Unlock()
}

func lookup(h uintptr) *ID {
	registryMu.Lock()
	defer registryMu.Unlock()
	return registry[h]
}
