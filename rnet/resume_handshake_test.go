package rnet

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
)

// TestResumeHandshakeReplacedBuildsNothingMeanwhile: a newer request ends
// the handshake under way, which learns why, and builds only once the
// older one has let go.
func TestResumeHandshakeReplacedBuildsNothingMeanwhile(t *testing.T) {
	e := newResumeEntry(nil)
	older := e.claim(context.Background())
	if err := older.acquire(); err != nil {
		t.Fatalf("the first handshake could not build: %v", err)
	}
	newer := e.claim(context.Background())
	if !errors.Is(older.err(), errResumeReplaced) {
		t.Fatalf("the replaced handshake's cause is %v, want errResumeReplaced", older.err())
	}
	var released atomic.Bool
	built := make(chan bool)
	go func() {
		err := newer.acquire()
		built <- err == nil && released.Load()
	}()
	released.Store(true)
	older.release()
	if !<-built {
		t.Fatal("the newer handshake built before the older let go, or not at all")
	}
	newer.release()
	newer.release() // a second release does nothing
	if n := len(e.building); n != 1 {
		t.Fatalf("%d tokens to build after both ended, want 1", n)
	}
}

// TestResumeHandshakeReplaysHoldOnePath: of a flood of requests for one
// connection, every one but the last is ended before it builds, and at
// most one handshake holds a path at any time.
func TestResumeHandshakeReplaysHoldOnePath(t *testing.T) {
	e := newResumeEntry(nil)
	first := e.claim(context.Background())
	if err := first.acquire(); err != nil {
		t.Fatal(err)
	}
	const replays = 100
	results := make(chan error, replays)
	for range replays {
		h := e.claim(context.Background())
		go func() {
			err := h.acquire()
			if err == nil {
				if len(e.building) != 0 {
					err = errors.New("a token to build was left while one handshake held one")
				}
				h.release()
			}
			results <- err
		}()
	}
	first.release()
	built := 0
	for range replays {
		err := <-results
		switch {
		case err == nil:
			built++
		case !errors.Is(err, errResumeReplaced):
			t.Errorf("a replayed request ended with %v, want errResumeReplaced", err)
		}
	}
	if built != 1 {
		t.Fatalf("%d of %d replays built a path, want one, the last (the others were replaced)", built, replays)
	}
	if n := len(e.building); n != 1 {
		t.Fatalf("%d tokens to build after the flood, want 1", n)
	}
}

// TestResumeHandshakeListenerClose: a handshake waiting for the one it
// replaced to let go ends when the listener closes, with the listener's
// cause.
func TestResumeHandshakeListenerClose(t *testing.T) {
	e := newResumeEntry(nil)
	holder := e.claim(context.Background())
	if err := holder.acquire(); err != nil {
		t.Fatal(err)
	}
	closed := errors.New("listener closed")
	listener, closeListener := context.WithCancelCause(context.Background())
	waiting := e.claim(listener)
	done := make(chan error)
	go func() { done <- waiting.acquire() }()
	closeListener(closed)
	if err := <-done; !errors.Is(err, closed) {
		t.Fatalf("acquire after the listener closed = %v, want its cause", err)
	}
	waiting.release()
	holder.release()
	if n := len(e.building); n != 1 {
		t.Fatalf("%d tokens to build, want 1", n)
	}
}

// TestResumeReplacedIsNoRefusal: a replaced resume request is rejected
// with a reason the dialer does not take for a forgotten connection, and
// counted as evicted, not as a failure of the listener's.
func TestResumeReplacedIsNoRefusal(t *testing.T) {
	err := fmt.Errorf("rnet: the connection did not start resuming: %w", errResumeReplaced)
	if r := rejectReasonOf(err); r.code == rejectResumeRefused || r.busy() {
		t.Errorf("a replaced request is rejected with reason %d", r.code)
	}
	for _, refused := range []bool{true, false} {
		if f := handshakeFailureOf(err, refused); f != failEvicted {
			t.Errorf("handshakeFailureOf(replaced, refused %v) = %v, want evicted", refused, f)
		}
	}
}
