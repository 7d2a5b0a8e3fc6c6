package rnet

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/simqp"
)

// collectUntil runs the garbage collector until done delivers, for at most
// a minute: a cleanup runs on its own goroutine some time after the cycle
// that found its object unreachable.
func collectUntil[T any](t *testing.T, what string, done <-chan T) T {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		runtime.GC()
		select {
		case v := <-done:
			return v
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after a minute of collections for %s", what)
		}
	}
}

// writeAndDropOn writes msg on a fresh connection and forgets it without
// closing it, returning only its peer. A Write returns once msg is in the
// send ring, so the rest is sent after the caller has dropped the Conn.
func writeAndDropOn(t *testing.T, pipe pipeMaker, msg []byte) *Conn {
	c1, c2 := pipe(t)
	if _, err := c1.Write(msg); err != nil {
		t.Fatal(err)
	}
	return c2
}

// droppedConnDelivers writes on a connection and drops it without Close
// (more than the peer's ring, less than both rings: some is still waiting
// in the send ring for credits), then checks that once the collector has
// found it the peer reads every byte, then io.EOF. It closes the peer.
func droppedConnDelivers(t *testing.T, pipe pipeMaker) {
	t.Helper()
	msg := bytes.Repeat([]byte("dropped but delivered "), 9000)
	peer := writeAndDropOn(t, pipe, msg)
	defer peer.Close()
	peer.SetReadDeadline(time.Now().Add(2 * time.Minute)) // fail, not hang, if it is never closed
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, err := io.ReadAll(peer)
		done <- result{data, err}
	}()
	r := collectUntil(t, "the peer's io.EOF", done)
	if r.err != nil || !bytes.Equal(r.data, msg) {
		t.Fatalf("peer read %d of %d bytes, then %v; want all, then io.EOF", len(r.data), len(msg), r.err)
	}
}

// TestSimUnreferencedConnIsClosed: a Conn that nobody references any more,
// and that was never closed, is closed once the collector finds it, as a
// *net.TCPConn's socket is: the peer reads every byte it was written, then
// io.EOF, and the Conn's goroutines end.
func TestSimUnreferencedConnIsClosed(t *testing.T) {
	before := procstat.GoroutineIDs()
	droppedConnDelivers(t, simMaker(nil))
	if fresh := procstat.WaitNoNewGoroutines(before); len(fresh) > 0 {
		t.Errorf("%d goroutines left:\n%s", len(fresh), strings.Join(fresh, "\n\n"))
	}
}

// readOn reads from c; the caller keeps no reference to c.
func readOn(c *Conn, got chan<- error) {
	_, err := c.Read(make([]byte, 1))
	got <- err
}

// TestSimBlockedReadKeepsItsConn: a Read blocked on a Conn that its caller
// mentions nowhere else keeps the Conn alive; the collector does not close
// it under the Read.
func TestSimBlockedReadKeepsItsConn(t *testing.T) {
	c1, c2 := simPipe(t, nil)
	defer c2.Close()
	inner := c1.conn // does not keep the handle alive
	parking := make(chan struct{}, 1)
	inner.QueuePair().(*simqp.QP).Waiting = parking
	got := make(chan error, 1)
	go readOn(c1, got)
	c1 = nil
	select { // only the Read waits on the completion channel here
	case <-parking:
	case <-time.After(conntest.Timeout(t)):
		t.Fatal("the Read did not park")
	}
	for range 5 {
		runtime.GC()
	}
	if _, err := c2.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("blocked Read on an otherwise unreferenced Conn: %v", err)
	}
	// Now nothing references it: it closes, and the peer sees io.EOF.
	eof := make(chan error, 1)
	go func() {
		_, err := c2.Read(make([]byte, 1))
		eof <- err
	}()
	if err := collectUntil(t, "the peer's io.EOF", eof); !errors.Is(err, io.EOF) {
		t.Fatalf("peer Read after the Conn was collected: %v, want io.EOF", err)
	}
}
