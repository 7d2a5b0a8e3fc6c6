package stream

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simqp"
)

var _ QueuePair = (*simqp.QP)(nil)

// testSettings are the settings package rnet gives a connection with the
// default Config, changed by mod if not nil; the ring's are normalised
// after mod.
func testSettings(mod func(*Settings)) Settings {
	s := Settings{
		Ring:             ring.Config{Autocork: true},
		ReapDelay:        DefaultReapDelay,
		BusyPoll:         10 * time.Microsecond,
		BusyPollLimit:    250 * time.Microsecond,
		BusyPollLimitMax: 2 * time.Millisecond,
		KeepAlive:        15 * time.Second,
		Linger:           10 * time.Second,
	}
	if mod != nil {
		mod(&s)
	}
	s.Ring = s.Ring.Normalize()
	return s
}

// Test addresses: a client's and a server's.
var (
	clientAddr = &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 40000}
	serverAddr = &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 7471}
)

// noRegions is the region half of a QueuePair for test doubles that cannot
// register memory: every ring stays at its first size.
type noRegions struct{}

func (noRegions) AddRegion(ring.RegionKind, int) (ring.Region, error) {
	return ring.Region{}, errors.New("test double: no memory registration")
}
func (noRegions) RemoveRegion(ring.Region) error { return nil }

// simPipe returns two connected Conns over a fresh simulated fabric, with
// testSettings(mod).
func simPipe(tb testing.TB, mod func(*Settings)) (*Conn, *Conn) {
	tb.Helper()
	return simPipeWrap(tb, mod, nil)
}

// simPipeWrap is simPipe with the first Conn's queue pair wrapped by wrap,
// if not nil.
func simPipeWrap(tb testing.TB, mod func(*Settings), wrap func(*simqp.QP) QueuePair) (*Conn, *Conn) {
	tb.Helper()
	set := testSettings(mod)
	a, b, err := simqp.Pair(set.Ring, clientAddr, serverAddr)
	if err != nil {
		tb.Fatal(err)
	}
	var qa QueuePair = a.QP
	if wrap != nil {
		qa = wrap(a.QP)
	}
	return Start(qa, a.Engine, set), Start(b.QP, b.Engine, set)
}

// simQPOf returns the simulated queue pair under c.
func simQPOf(c *Conn) *simqp.QP { return c.qp.(*simqp.QP) }
