//go:build cgo

package verbs

import (
	"context"
	"runtime"
	"sync"
	"syscall"
	"testing"
)

// TestCompChannelOutlivesItsWaiter: a channel closed while a Wait is still
// in its callback, whose last CQ then goes, is destroyed only once that
// callback has returned (it was destroyed at once, freeing the C struct and
// closing the fd under the callback).
func TestCompChannelOutlivesItsWaiter(t *testing.T) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(p[1])
	ch, err := newFakeCompChannel(p[0])
	if err != nil {
		t.Fatal(err)
	}
	ch.cqs[fakeCQHandle] = &CQ{} // one CQ uses it
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var sawC bool
	waited := make(chan error, 1)
	go func() {
		waited <- ch.poll.Wait(context.Background(), func() bool {
			once.Do(func() { close(entered) })
			<-release
			ch.mu.Lock()
			sawC = ch.c != nil
			ch.mu.Unlock()
			return true
		})
	}()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- ch.Close() }()
	for { // Close marks the channel closed, then waits for the callback
		ch.mu.Lock()
		c := ch.state.Closed()
		ch.mu.Unlock()
		if c {
			break
		}
		runtime.Gosched()
	}
	// The last CQ goes while the callback still runs, as CQ.Close ends.
	ch.mu.Lock()
	delete(ch.cqs, fakeCQHandle)
	err = ch.destroyIfUnusedLocked()
	ch.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	<-waited
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if !sawC {
		t.Fatal("the channel was destroyed while a waiter was still in its callback")
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.c != nil {
		t.Fatal("the channel was not destroyed once closed, unused and unwaited")
	}
}
