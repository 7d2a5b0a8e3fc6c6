package rnet

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/stream"
)

// A Close that leaves the queue pair to a WriteTo still running counts the
// connection closed once that WriteTo returns, as a Close without a loan
// does.
func TestSimCloseDuringLoanCountsClosed(t *testing.T) {
	before := openCount(ReadMetrics(), "rdma", "simulated")
	var destroyed atomic.Int32
	c, s := simPipeWrap(t, nil, func(q *simqp.QP) stream.QueuePair { return &destroyCounter{QP: q, n: &destroyed} })
	w := &blockingWriter{entered: make(chan struct{}), release: make(chan struct{})}
	copied := make(chan error, 1)
	go func() {
		_, err := c.WriteTo(w)
		copied <- err
	}()
	if _, err := s.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	<-w.entered
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	close(w.release)
	<-copied
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := destroyed.Load(); n != 1 {
		t.Errorf("queue pair destroyed %d times once WriteTo returned, want 1", n)
	}
	if got := openCount(ReadMetrics(), "rdma", "simulated"); got != before {
		t.Errorf("open connections once both ends closed: %d, want %d as before", got, before)
	}
}

type panickingReader struct{}

func (panickingReader) Read([]byte) (int, error) { panic("reader bug") }

type panickingWriter struct{}

func (panickingWriter) Write([]byte) (int, error) { panic("writer bug") }

// A reader or writer that panics inside ReadFrom or WriteTo ends its loan
// on the way out: once the panic is recovered (as net/http recovers a
// handler's), Close tears the connection down.
func TestSimPanicInLoanLeavesConnClosable(t *testing.T) {
	for _, tc := range []struct {
		name string
		copy func(c, s *Conn)
	}{
		{"ReadFrom", func(c, s *Conn) { c.ReadFrom(panickingReader{}) }},
		{"WriteTo", func(c, s *Conn) {
			if _, err := s.Write([]byte("bytes to lend")); err != nil {
				t.Fatal(err)
			}
			c.WriteTo(panickingWriter{})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var destroyed atomic.Int32
			c, s := simPipeWrap(t, nil, func(q *simqp.QP) stream.QueuePair { return &destroyCounter{QP: q, n: &destroyed} })
			defer s.Close()
			panicked := func() (p any) {
				defer func() { p = recover() }()
				tc.copy(c, s)
				return nil
			}()
			if panicked == nil {
				t.Fatal("the panic did not reach the caller")
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if n := destroyed.Load(); n != 1 {
				t.Errorf("queue pair destroyed %d times by Close after the panic, want 1", n)
			}
			if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Write after Close = %v, want net.ErrClosed", err)
			}
		})
	}
}
