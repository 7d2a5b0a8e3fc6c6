package rnettest

import (
	"net/netip"

	"github.com/rnet-dev/rnet/rnet"
)

// Pipe returns the two ends of a new connection on the process-wide
// Fabric, as net.Pipe does, without a Listener. Unlike net.Pipe's, the
// ends are real *rnet.Conns: a Write returns once its bytes are in the send
// ring, not when the other end reads them. Close both.
func Pipe() (*rnet.Conn, *rnet.Conn) {
	c, s, err := defaultFabric().Pipe()
	if err != nil {
		panic("rnettest: " + err.Error()) // the default Config is valid
	}
	return c, s
}

// Pipe returns the two ends of a new connection in f, configured by f's
// Config, without a Listener: the first from a loopback address, the second
// at another, as a Dial and an Accept would. The Fabric's faults apply to
// them. The error is the Config's, if it is invalid.
func (f *Fabric) Pipe() (*rnet.Conn, *rnet.Conn, error) {
	f.mu.Lock()
	n := f.dials
	f.dials += 2
	f.mu.Unlock()
	lo := netip.MustParseAddr("127.0.0.1")
	client := netip.AddrPortFrom(lo, uint16(firstEphemeralPort+n%ephemeralPorts))
	server := netip.AddrPortFrom(lo, uint16(firstEphemeralPort+(n+1)%ephemeralPorts))
	return f.pair(client, server, f.cfg, f.cfg)
}
