// Package rnetsim is the bridge from package rnettest to package rnet's
// handles. rnettest runs connections over the simulated fabric
// (internal/simqp), which package rnet does not import; it needs rnet only
// to check a Config and to hand a driver connection out as an *rnet.Conn,
// and the Listener that queues them. Package rnet sets these functions when
// it initialises, so that its public API has no test-only constructors: the
// only way in is this internal package, which programs outside the module
// cannot import.
//
// The functions take and return interfaces where rnet's own types go,
// since this package cannot name them: NewConn returns an *rnet.Conn, Listen
// an *rnet.Listener and an offer taking *rnet.Conn, Settings takes an
// *rnet.Config. A value of another type is an error, never a panic.
package rnetsim

import (
	"net"
	"net/netip"

	"github.com/rnet-dev/rnet/internal/stream"
)

var (
	// Settings checks cfg (a *rnet.Config, a nil one for the defaults) as Dial
	// does, and returns what the connection driver runs with.
	Settings func(cfg any) (stream.Settings, error)
	// NewConn hands c out as an *rnet.Conn configured by cfg (as for
	// Settings).
	NewConn func(c *stream.Conn, cfg any) (net.Conn, error)
	// Listen makes an *rnet.Listener at addr holding up to backlog
	// established connections, and the function that queues one for its
	// Accept: false when the backlog is full, the Listener is closed or c
	// is not an *rnet.Conn, and the caller then closes the connection. The
	// Listener's Close calls stop first.
	Listen func(addr netip.AddrPort, backlog int, stop func()) (net.Listener, func(c net.Conn) bool)
)
