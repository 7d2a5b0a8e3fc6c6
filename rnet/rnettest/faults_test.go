package rnettest_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnettest"
)

func TestPipe(t *testing.T) {
	c, s := rnettest.Pipe()
	defer c.Close()
	defer s.Close()
	for _, ends := range [][2]*rnet.Conn{{c, s}, {s, c}} {
		if _, err := ends[0].Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4)
		if _, err := io.ReadFull(ends[1], got); err != nil || string(got) != "ping" {
			t.Fatalf("read %q, %v", got, err)
		}
	}
	if c.LocalAddr().String() != s.RemoteAddr().String() || s.LocalAddr().String() != c.RemoteAddr().String() {
		t.Errorf("ends %v -> %v and %v -> %v do not face each other", c.LocalAddr(), c.RemoteAddr(), s.LocalAddr(), s.RemoteAddr())
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("Read after the other end's CloseWrite = %v, want io.EOF", err)
	}
}

// pipe is f.Pipe's two ends, closed when the test ends.
func pipe(t *testing.T, f *rnettest.Fabric) (c, s *rnet.Conn) {
	t.Helper()
	c, s, err := f.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		c.Close()
	})
	return c, s
}

// A cut connection fails a blocked Read at both ends with ErrPeerGone.
func TestCut(t *testing.T) {
	f := rnettest.NewFabric(nil)
	c, s := pipe(t, f)
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	if err := f.Cut(c); err != nil {
		t.Fatal(err)
	}
	var oe *net.OpError
	if err := <-read; !errors.Is(err, rnet.ErrPeerGone) || !errors.As(err, &oe) || oe.Op != "read" {
		t.Errorf("blocked Read on a cut connection = %v, want a read *net.OpError matching ErrPeerGone", err)
	}
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, rnet.ErrPeerGone) {
		t.Errorf("Read at the other end = %v, want ErrPeerGone", err)
	}
	c.Close()
	if err := f.Cut(c); err == nil {
		t.Error("Cut of a closed Conn succeeded")
	}
	other, _ := rnettest.Pipe()
	defer other.Close()
	if err := f.Cut(other); err == nil {
		t.Error("Cut of another Fabric's Conn succeeded")
	}
}

// A writer to a peer that vanished gets a completion error; a reader with
// keepalives on learns of it from them.
func TestVanishPeer(t *testing.T) {
	f := rnettest.NewFabric(&rnet.Config{KeepAlive: time.Second})
	c, s, err := f.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer c.Close()
	r, _, err := f.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := f.VanishPeer(c); err != nil {
		t.Fatal(err)
	}
	if err := f.VanishPeer(r); err != nil {
		t.Fatal(err)
	}
	c.SetWriteDeadline(time.Now().Add(time.Minute))
	for {
		if _, err = c.Write([]byte("anyone there?")); err != nil {
			break
		}
	}
	var ce *rnet.CompletionError
	if !errors.As(err, &ce) || ce.Status != rnet.WCRetryExcErr || !errors.Is(err, rnet.ErrPeerGone) {
		t.Errorf("Write to a vanished peer = %v, want a *rnet.CompletionError with WCRetryExcErr matching ErrPeerGone", err)
	}
	r.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := r.Read(make([]byte, 1)); !errors.Is(err, rnet.ErrPeerGone) {
		t.Errorf("Read from a vanished peer with 1 s keepalives = %v, want ErrPeerGone", err)
	}
}

// A peer that holds back credits stalls the writer until it grants them.
func TestHoldCredits(t *testing.T) {
	f := rnettest.NewFabric(nil)
	c, s := pipe(t, f)
	release, err := f.HoldCredits(s)
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(io.Discard, s)
		read <- n
	}()
	c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	written, err := c.Write(make([]byte, 4<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write of 4 MiB to a peer that grants no credits = %d, %v; want a timeout", written, err)
	}
	if st := c.Stats(); st.CreditStalls+st.BufferStalls == 0 {
		t.Errorf("no credit or buffer stall counted: %+v", st)
	}
	release()
	c.SetWriteDeadline(time.Time{})
	more, err := c.Write(make([]byte, 1<<20))
	if err != nil {
		t.Fatalf("Write after the credits came back: %v", err)
	}
	c.Close()
	if n := <-read; n != int64(written+more) {
		t.Errorf("the peer read %d bytes, want the %d written", n, written+more)
	}
}

// What a delayed end sends arrives no earlier than the delay.
func TestDelay(t *testing.T) {
	f := rnettest.NewFabric(nil)
	c, s := pipe(t, f)
	const d = 200 * time.Millisecond
	if err := f.Delay(c, d); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	start := time.Now()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if took := time.Since(start); took < d {
		t.Errorf("a delayed write arrived after %v, want at least %v", took, d)
	}
	// The reply is not delayed, and the stream keeps its order.
	if _, err := s.Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "world" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if err := f.Delay(c, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, 100)
	if _, err := io.ReadFull(s, got); err != nil {
		t.Fatal(err)
	}
	for i, b := range got {
		if b != byte(i) {
			t.Fatalf("byte %d is %d: the stream lost its order across the delay's end", i, b)
		}
	}
}
