//go:build cgo

package cm

import (
	"context"
	"math"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestChannelOutlivesItsWaiter: a channel closed while a Next is still in
// its callback, whose last ID then goes, is destroyed only once that
// callback has returned (it was destroyed at once, freeing the C struct and
// closing the fd under the callback).
func TestChannelOutlivesItsWaiter(t *testing.T) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(p[1])
	ch, err := newFakeEventChannel(p[0])
	if err != nil {
		t.Fatal(err)
	}
	if !ch.addID() {
		t.Fatal("addID on an open channel failed")
	}
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
	ch.removeID() // the last ID goes while the callback still runs
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

// TestMs: timeouts go to rdma_cm as an int of milliseconds, rounded up,
// never zero or negative (a huge duration wrapped to a negative count).
func TestMs(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{0, 1},
		{-time.Second, 1},
		{time.Microsecond, 1},
		{1500 * time.Microsecond, 2},
		{time.Second, 1000},
		{math.MaxInt64, 1<<31 - 1},
	} {
		if got := ms(tc.d); got != tc.want {
			t.Errorf("ms(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}
