//go:build linux && cgo

package rnet

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// A Read that parks on a device costs two crossings into C: one that arms
// the CQ and polls it, and after the wakeup one that takes the event, posts
// and polls. The receive the message used goes back with a later crossing
// (see ring.Engine.RepostDue), not one of its own. The peer's Write costs
// one more, and nothing else crosses while the reader waits. (Until the
// event moved into the post-and-poll crossing, a park took four: the
// channel was also read once before parking, in vain, and once after the
// wakeup; and the repost took a fifth.) The first round leaves no event
// behind for the measured one; spinning is off so that the reader parks at
// once.
func TestRXEParkCostsTwoCrossings(t *testing.T) {
	client, server := rxeMaker(rdmatest.Require(t), &Config{BusyPoll: -1})(t)
	defer client.Close()
	defer server.Close()
	buf := make([]byte, 16)
	for round := range 2 {
		base := ioWaiters(t)
		before, parks := verbs.CgoCalls(), server.Stats().Parks
		got := make(chan error, 1)
		go func() {
			n, err := server.Read(buf)
			if err == nil && !bytes.Equal(buf[:n], []byte{byte(round)}) {
				t.Errorf("read %q, want %q", buf[:n], []byte{byte(round)})
			}
			got <- err
		}()
		waitIOWaiters(t, base+1)
		if _, err := client.Write([]byte{byte(round)}); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		calls := verbs.CgoCalls() - before
		parked := server.Stats().Parks - parks
		t.Logf("round %d: %d crossings, %d parks", round, calls, parked)
		if round == 1 && (calls != 3 || parked != 1) {
			t.Errorf("a parked Read and the Write that woke it crossed into C %d times with %d parks, want 3 with 1", calls, parked)
		}
	}
}

// ioWaiters counts the goroutines parked in the netpoller.
func ioWaiters(t *testing.T) int {
	t.Helper()
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("[IO wait"))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// waitIOWaiters waits until at least n goroutines are parked in the
// netpoller.
func waitIOWaiters(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for ioWaiters(t) < n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d goroutines parked in the netpoller", n)
		}
		runtime.Gosched()
	}
}

// allStacks returns every goroutine's stack.
func allStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

func goroutineID(stack string) (string, bool) {
	id, ok := strings.CutPrefix(stack, "goroutine ")
	id, _, _ = strings.Cut(id, " ")
	return id, ok
}

// goroutineIDs returns the IDs of the live goroutines.
func goroutineIDs() map[string]bool {
	ids := make(map[string]bool)
	for _, st := range allStacks() {
		if id, ok := goroutineID(st); ok {
			ids[id] = true
		}
	}
	return ids
}

// newGoroutines returns the stacks of the goroutines alive now that were not
// in before.
func newGoroutines(before map[string]bool) []string {
	var fresh []string
	for _, st := range allStacks() {
		if id, ok := goroutineID(st); ok && !before[id] {
			fresh = append(fresh, st)
		}
	}
	return fresh
}
