//go:build linux && cgo

package rnet

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
	g := newPollGroup(cq)
	var members [2]*groupMember
	for i := range members {
		m, ok := g.reserve(16, 16, 0)
		if !ok {
			t.Fatal("the group has no room for a member")
		}
		m.attach(uint32(7 + i))
		members[i] = m
	}
	r := groupRegistry{byDevice: map[uintptr][]*pollGroup{1: {g}}}
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
		if err := r.leave(m, nil); err != nil {
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
