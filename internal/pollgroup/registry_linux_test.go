//go:build linux && cgo

package pollgroup

import (
	"sync/atomic"
	"testing"

	"github.com/rnet-dev/rnet/internal/wr"
)

// TestGroupLeaveOutsideRegistryLock: a connection leaving a poll group
// whose CQ a peer keeps full polls it without the registry's lock, which
// every join and leave on every device takes; the registry still forgets
// the group once its last member has left.
func TestGroupLeaveOutsideRegistryLock(t *testing.T) {
	cq := newFloodCQ(1024, 20000)
	for range 1024 {
		cq.queued = append(cq.queued, wr.Completion{ID: 1, QPNum: floodQPNum, Opcode: wr.WCRDMAWrite})
	}
	g := New(cq, nil)
	var members [2]*Member
	for i := range members {
		m, ok := g.Reserve(16, 16, 0)
		if !ok {
			t.Fatal("the group has no room for a member")
		}
		m.Attach(&numQP{num: uint32(7 + i)}, nil)
		members[i] = m
	}
	r := Registry{byDevice: map[uintptr][]*Group{1: {g}}}
	for _, m := range members {
		m.reg = &r
	}
	var polls, locked atomic.Int64
	cq.mu.Lock()
	cq.onPoll = func(int) {
		polls.Add(1)
		if !r.mu.TryLock() {
			locked.Add(1)
			return
		}
		r.mu.Unlock()
	}
	cq.mu.Unlock()
	for _, m := range members {
		if err := m.Leave(nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := locked.Load(); n > 0 {
		t.Errorf("%d of %d polls of the CQ were made with the registry's lock held", n, polls.Load())
	}
	if polls.Load() == 0 {
		t.Error("leave polled nothing: the test shows nothing")
	}
	if n := r.count(); n != 0 {
		t.Errorf("the registry still has %d groups after the last member left", n)
	}
}
