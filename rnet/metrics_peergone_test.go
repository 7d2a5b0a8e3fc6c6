package rnet

import (
	"errors"
	"log/slog"
	"net"
	"runtime"
	"testing"
	"time"
)

// TestPeerGoneCountedOnceWhateverTellsIt: a connection whose peer vanished
// counts once in PeersGone whether a failed completion, the transport's
// disconnect or both tell it, and whether or not a tick comes before
// Close: the failed completion alone is counted (by Close at the latest),
// and the disconnect that follows it is not counted again.
func TestPeerGoneCountedOnceWhateverTellsIt(t *testing.T) {
	for _, tc := range []struct {
		name       string
		disconnect bool // the connection manager reports the transport gone too
	}{
		{"completion", false},
		{"completion then disconnect", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var recs records
			a, b := simPairLogged(t, slog.New(&recs))
			defer b.Close()
			before := ReadMetrics().Counters.PeersGone
			simQPOf(b).Endpoint().Vanish()
			a.SetWriteDeadline(time.Now().Add(time.Minute))
			var err error
			for err == nil {
				_, err = a.Write([]byte("anyone there?"))
			}
			var ce *CompletionError
			if !errors.As(err, &ce) || !errors.Is(err, ErrPeerGone) {
				t.Fatalf("Write to a vanished peer = %v, want a *CompletionError matching ErrPeerGone", err)
			}
			if tc.disconnect {
				a.conn.TransportDisconnected()
			}
			a.Close()
			if got := ReadMetrics().Counters.PeersGone - before; got != 1 {
				t.Errorf("PeersGone grew by %d, want 1", got)
			}
			if got := len(recs.all("rnet: peer gone")); got != 1 {
				t.Errorf("peer gone logged %d times, want 1", got)
			}
		})
	}
}

// TestDroppedTCPConnStopsCounting: a *TCPConn dropped without Close leaves
// the open-connection gauge once the collector has found it, as its
// descriptor is closed then too; one closed twice counts down once.
func TestDroppedTCPConnStopsCounting(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	before := openCount(ReadMetrics(), "tcp", "")
	dialTCPConn := func() *TCPConn {
		c, err := net.Dial("tcp", tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return newTCPConn(c.(*net.TCPConn), FallbackRefused, nil)
	}
	closed := dialTCPConn()
	func() { dialTCPConn() }() // dropped
	if got := openCount(ReadMetrics(), "tcp", "") - before; got != 2 {
		t.Fatalf("open TCP connections grew by %d with two made, want 2", got)
	}
	closed.Close()
	closed.Close()
	if got := openCount(ReadMetrics(), "tcp", "") - before; got != 1 {
		t.Fatalf("open TCP connections after one Close (twice) grew by %d, want 1", got)
	}
	for range 10 {
		runtime.GC()
		if openCount(ReadMetrics(), "tcp", "") == before {
			return
		}
	}
	t.Errorf("open TCP connections after 10 collections = %d, want %d: the dropped one still counts",
		openCount(ReadMetrics(), "tcp", ""), before)
}
