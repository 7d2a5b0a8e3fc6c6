package simqp_test

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/stream"
	"github.com/rnet-dev/rnet/internal/wr"
)

// A connection whose queue pair fails, as after a device error, ends: a
// Read blocked on that side returns its receive's flush (a device says why
// by an async event, never on a receive), and the peer, whose queue pair is
// still up, learns of it on its next Write.
func TestFailedQueuePairEndsTheConnection(t *testing.T) {
	set := stream.Settings{
		Ring:             ring.Config{}.Normalize(),
		ReapDelay:        stream.DefaultReapDelay,
		BusyPoll:         10 * time.Microsecond,
		BusyPollLimit:    250 * time.Microsecond,
		BusyPollLimitMax: 2 * time.Millisecond,
		KeepAlive:        15 * time.Second,
		Linger:           10 * time.Second,
	}
	a, b, err := simqp.Pair(set.Ring,
		&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 40000}, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 7471})
	if err != nil {
		t.Fatal(err)
	}
	c, s := stream.Start(a.QP, a.Engine, set), stream.Start(b.QP, b.Engine, set)
	defer c.Close()
	defer s.Close()
	if _, err := s.Write([]byte("before")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "before" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}

	c.SetReadDeadline(time.Now().Add(time.Minute))
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(buf)
		read <- err
	}()
	a.QP.Endpoint().Fail(wr.WCGeneralErr)
	err = <-read
	var ce *ring.CompletionError
	if !errors.As(err, &ce) || ce.Status != wr.WCWRFlushErr || !ce.Recv {
		t.Fatalf("Read on the failed side = %v, want its receive's WCWRFlushErr", err)
	}

	s.SetWriteDeadline(time.Now().Add(time.Minute))
	for err = nil; err == nil; {
		_, err = s.Write([]byte("anyone there?"))
	}
	if !errors.Is(err, ring.ErrPeerGone) {
		t.Fatalf("Write on the peer = %v, want ErrPeerGone", err)
	}
}
