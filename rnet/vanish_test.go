package rnet

import (
	"errors"
	"io"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestSimPeerVanishedDataKept: bytes that arrived before the peer's transport
// went away without a DISCONNECT are still read, as TCP reads what came
// before a reset; then Read reports ErrPeerGone, not io.EOF.
func TestSimPeerVanishedDataKept(t *testing.T) {
	a, b := simPipe(t, nil)
	defer a.Close()
	defer b.Close()
	msg := []byte("the last words before the peer vanished")
	if _, err := a.Write(msg); err != nil {
		t.Fatal(err)
	}
	b.SetDeadline(time.Now().Add(time.Minute))
	first := make([]byte, 1)
	if _, err := io.ReadFull(b, first); err != nil {
		t.Fatal(err)
	}
	a.qp.(*simQP).disconnect() // the transport goes, no DISCONNECT said
	// Once a Write fails, the connection knows the peer is gone.
	for {
		if _, err := b.Write(msg); err != nil {
			if !errors.Is(err, ErrPeerGone) {
				t.Fatalf("Write to the vanished peer: %v, want ErrPeerGone", err)
			}
			break
		}
	}
	rest, err := io.ReadAll(b)
	if string(first)+string(rest) != string(msg) {
		t.Errorf("read %q after the peer vanished, want %q", rest, msg[1:])
	}
	if !errors.Is(err, ErrPeerGone) {
		t.Errorf("Read after the data: %v, want ErrPeerGone", err)
	}
}

// TestSimCloseReadEndsSpinningRead: CloseRead ends a Read that is busy
// polling (here for up to a minute), as it ends a parked one, with io.EOF.
func TestSimCloseReadEndsSpinningRead(t *testing.T) {
	a, b := simPipe(t, &Config{BusyPoll: time.Minute})
	defer a.Close()
	defer b.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := a.Read(make([]byte, 1))
		errc <- err
	}()
	for a.Stats().Spins == 0 {
		runtime.Gosched() // until the Read spins
	}
	if err := a.CloseRead(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err != io.EOF {
			t.Fatalf("Read after CloseRead = %v, want io.EOF", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a spinning Read did not see CloseRead")
	}
}

// TestSimPusherHandOverToLeavingRead: a Write returned with bytes waiting
// for the peer's grant, so the pusher polls; a Read with a deadline queues
// behind it, and the deadline's kick makes the pusher hand the wait over to
// that Read, which leaves. Someone must still poll: the peer's grant has to
// bring the rest of the Write out (before, it waited for the 15 s tick).
func TestSimPusherHandOverToLeavingRead(t *testing.T) {
	cfg := &Config{SendBufferSize: 4096, RecvBufferSize: 4096, SendQueueSize: 16, RecvQueueSize: 16}
	for range 20 {
		a, b := simPipe(t, cfg)
		msg := make([]byte, 6000)
		if n, err := a.Write(msg); n != len(msg) || err != nil {
			t.Fatal(n, err)
		}
		for {
			a.mu.Lock()
			pushing := a.pushing && a.polling
			a.mu.Unlock()
			if pushing {
				break
			}
			runtime.Gosched()
		}
		a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := a.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read: %v", err)
		}
		b.SetReadDeadline(time.Now().Add(10 * time.Second)) // under the 15 s tick
		if _, err := io.ReadFull(b, make([]byte, len(msg))); err != nil {
			t.Fatalf("the rest of the Write did not come: %v", err)
		}
		a.Close()
		b.Close()
	}
}

// TestSimLingerExpiryIsNotEOF: Close gives up on a peer that does not read
// within Linger. It returns ErrAborted, and the peer reads what came and then
// ErrPeerGone: never a clean io.EOF after a truncated stream.
func TestSimLingerExpiryIsNotEOF(t *testing.T) {
	a, b := simPipe(t, &Config{Linger: 100 * time.Millisecond})
	defer b.Close()
	msg := make([]byte, 200<<10) // more than the peer's 128 KiB ring
	if n, err := a.Write(msg); n != len(msg) || err != nil {
		t.Fatal(n, err)
	}
	if err := a.Close(); !errors.Is(err, ErrAborted) {
		t.Fatalf("Close after Linger = %v, want ErrAborted", err)
	}
	b.SetReadDeadline(time.Now().Add(time.Minute))
	got, err := io.ReadAll(b)
	if len(got) == 0 || len(got) >= len(msg) {
		t.Errorf("peer read %d of %d bytes", len(got), len(msg))
	}
	if !errors.Is(err, ErrPeerGone) {
		t.Errorf("peer's Read after %d bytes = %v, want ErrPeerGone", len(got), err)
	}
}
