package rnet

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
)

// noRegions is the region half of a queuePair for test doubles that cannot
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
func simPipeWrap(tb testing.TB, cfg *Config, wrap func(*simQP) queuePair) (*Conn, *Conn) {
	tb.Helper()
	a, b, err := simPairWrapped(cfg, netip.MustParseAddrPort("10.0.0.1:40000"),
		netip.MustParseAddrPort("10.0.0.2:7471"), wrap)
	if err != nil {
		tb.Fatal(err)
	}
	return a, b
}
