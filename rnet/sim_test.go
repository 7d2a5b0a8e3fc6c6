package rnet

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/stream"
)

// noRegions is the region half of a stream.QueuePair for test doubles that cannot
// register memory: every ring stays at its first size.
type noRegions struct{}

func (noRegions) AddRegion(ring.RegionKind, int) (ring.Region, error) {
	return ring.Region{}, errors.New("test double: no memory registration")
}
func (noRegions) RemoveRegion(ring.Region) error { return nil }

// simPipe returns two connected Conns over a fresh simulated fabric.
func simPipe(tb testing.TB, cfg *Config) (*Conn, *Conn) {
	tb.Helper()
	return simPipeWrap(tb, cfg, nil)
}

// simPipeWrap is simPipe with the first Conn's queue pair wrapped by wrap,
// if not nil.
func simPipeWrap(tb testing.TB, cfg *Config, wrap func(*simqp.QP) stream.QueuePair) (*Conn, *Conn) {
	tb.Helper()
	a, b, err := simPairWrapped(cfg, netip.MustParseAddrPort("10.0.0.1:40000"),
		netip.MustParseAddrPort("10.0.0.2:7471"), wrap)
	if err != nil {
		tb.Fatal(err)
	}
	return a, b
}

// simPair returns two Conns connected over a fresh simulated fabric, the
// first at address client, the second at server, both configured by cfg.
func simPair(cfg *Config, client, server netip.AddrPort) (*Conn, *Conn, error) {
	return simPairWrapped(cfg, client, server, nil)
}

// simPairWrapped is simPair with the client's queue pair wrapped by wrap,
// if not nil: rnet's tests hold its completions back with it.
func simPairWrapped(cfg *Config, client, server netip.AddrPort, wrap func(*simqp.QP) stream.QueuePair) (*Conn, *Conn, error) {
	set := cfg.settings()
	a, b, err := simqp.Pair(set.ring, netAddr(client), netAddr(server))
	if err != nil {
		return nil, nil, err
	}
	var qa stream.QueuePair = a.QP
	if wrap != nil {
		qa = wrap(a.QP)
	}
	return newConn(qa, a.Engine, set), newConn(b.QP, b.Engine, set), nil
}

// simQPOf returns the simulated queue pair under c.
func simQPOf(c *Conn) *simqp.QP { return c.conn.QueuePair().(*simqp.QP) }
