package rnet

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// *net.TCPConn's setters, on both kinds of connection a fallback dial or a
// DualListener hands out.
var _ interface {
	SetNoDelay(bool) error
	SetKeepAlive(bool) error
	SetKeepAlivePeriod(time.Duration) error
	SetLinger(int) error
} = (*Conn)(nil)

var _ interface {
	SetNoDelay(bool) error
	SetKeepAlive(bool) error
	SetKeepAlivePeriod(time.Duration) error
	SetLinger(int) error
} = (*TCPConn)(nil)

func TestSimSetNoDelay(t *testing.T) {
	c, s := simPipe(t, nil)
	defer c.Close()
	defer s.Close()
	if c.Config().NoDelay {
		t.Fatal("a Conn dialled with the default Config starts with NoDelay")
	}
	for _, noDelay := range []bool{true, false, true} {
		if err := c.SetNoDelay(noDelay); err != nil {
			t.Fatal(err)
		}
		if got := c.Config().NoDelay; got != noDelay {
			t.Errorf("after SetNoDelay(%v), Config().NoDelay = %v", noDelay, got)
		}
		roundTripOnceSim(t, c, s)
	}
}

// roundTripOnceSim writes a byte each way and reads it.
func roundTripOnceSim(t *testing.T, a, b *Conn) {
	t.Helper()
	buf := make([]byte, 1)
	for _, ends := range [][2]*Conn{{a, b}, {b, a}} {
		if _, err := ends[0].Write([]byte{7}); err != nil {
			t.Fatal(err)
		}
		if _, err := ends[1].Read(buf); err != nil || buf[0] != 7 {
			t.Fatalf("read %v, %v; want 7", buf, err)
		}
	}
}

func TestSimSetKeepAlive(t *testing.T) {
	c, s := simPipe(t, &Config{KeepAlive: -1})
	defer c.Close()
	defer s.Close()
	if got := c.Config().KeepAlive; got != -1 {
		t.Fatalf("Config().KeepAlive = %v with keepalives off, want -1", got)
	}
	if err := c.SetKeepAlive(true); err != nil {
		t.Fatal(err)
	}
	if got := c.Config().KeepAlive; got != 15*time.Second {
		t.Errorf("after SetKeepAlive(true), Config().KeepAlive = %v, want the default 15s", got)
	}
	if err := c.SetKeepAlivePeriod(1500 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := c.Config().KeepAlive; got != 2*time.Second {
		t.Errorf("after SetKeepAlivePeriod(1.5s), Config().KeepAlive = %v, want 2s (rounded up)", got)
	}
	// The new period takes effect: a keepalive goes out within it.
	deadline := time.Now().Add(time.Minute)
	for c.Stats().KeepalivesSent == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no keepalive within a minute of SetKeepAlivePeriod(1.5s)")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.SetKeepAlive(false); err != nil {
		t.Fatal(err)
	}
	if got := c.Config().KeepAlive; got != -1 {
		t.Errorf("after SetKeepAlive(false), Config().KeepAlive = %v, want -1", got)
	}
	if err := c.SetKeepAlive(true); err != nil {
		t.Fatal(err)
	}
	if got := c.Config().KeepAlive; got != 2*time.Second {
		t.Errorf("SetKeepAlive(true) after SetKeepAlivePeriod(2s) runs at %v, want 2s", got)
	}
	if err := c.SetKeepAlivePeriod(-time.Second); err == nil {
		t.Error("SetKeepAlivePeriod(-1s) succeeded")
	}
}

// SetLinger(0) makes Close drop what the peer has not taken at once, as
// TCP's does; SetLinger(-1) restores Config.Linger.
func TestSimSetLinger(t *testing.T) {
	// A Linger far longer than any Close here, so that a Close that waited
	// for it would show.
	small := &Config{SendBufferSize: 4096, RecvBufferSize: 4096, IdleBufferSize: 4096, Linger: 10 * time.Minute}
	c, s := simPipe(t, small)
	defer s.Close()
	// Fill the peer's receive ring and our send ring: the peer reads
	// nothing. Until a send has stalled for want of the peer's space, a
	// slow machine may still send all that was written.
	for deadline := time.Now().Add(time.Minute); ; {
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Write(make([]byte, 1<<20)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Write to a peer that reads nothing = %v, want a timeout", err)
		}
		if st := c.Stats(); st.BufferStalls+st.CreditStalls > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a minute of Writes to a peer that reads nothing never stalled for its space")
		}
	}
	if err := c.SetLinger(5); err != nil {
		t.Fatal(err)
	}
	if got := c.Config().Linger; got != 5*time.Second {
		t.Errorf("after SetLinger(5), Config().Linger = %v", got)
	}
	if err := c.SetLinger(-1); err != nil {
		t.Fatal(err)
	}
	if got := c.Config().Linger; got != 10*time.Minute {
		t.Errorf("after SetLinger(-1), Config().Linger = %v, want Config.Linger, 10m", got)
	}
	if err := c.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	// The driver holds 0 (no wait), as Config{Linger: -1} gives it; Config
	// shows that as -1, its way of saying Close drops unsent data at once.
	if got := c.conn.Settings().Linger; got != 0 {
		t.Errorf("after SetLinger(0), the driver's Linger = %v, want 0", got)
	}
	if got := c.Config().Linger; got != -1 {
		t.Errorf("after SetLinger(0), Config().Linger = %v, want -1 (drop at once)", got)
	}
	start := time.Now()
	if err := c.Close(); !errors.Is(err, ErrAborted) {
		t.Errorf("Close with SetLinger(0) and unsent data = %v, want ErrAborted", err)
	}
	if took := time.Since(start); took > 5*time.Minute {
		t.Errorf("Close with SetLinger(0) took %v", took)
	}
	var oe *net.OpError
	for name, err := range map[string]error{
		"SetNoDelay": c.SetNoDelay(true), "SetKeepAlive": c.SetKeepAlive(true),
		"SetKeepAlivePeriod": c.SetKeepAlivePeriod(time.Second), "SetLinger": c.SetLinger(1),
	} {
		if !errors.Is(err, net.ErrClosed) || !errors.As(err, &oe) {
			t.Errorf("%s after Close = %v, want a *net.OpError matching net.ErrClosed", name, err)
		}
	}
}
