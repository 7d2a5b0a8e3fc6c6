package rnettest

import (
	"context"
	"net"

	"github.com/rnet-dev/rnet/rnet"
)

// Dialer dials a Fabric's Listeners with a Config of its own for the
// dialling end, as an rnet.Dialer's Config is; the accepting end is
// configured by the Fabric's. Its methods are the Fabric's, and may be
// called from any goroutine.
type Dialer struct {
	// Fabric is the Fabric dialled; nil is the process-wide one.
	Fabric *Fabric
	// Config configures the dialling end; nil is rnet's defaults, as
	// for an rnet.Dialer.
	Config *rnet.Config
}

func (d *Dialer) fabric() *Fabric {
	if d.Fabric != nil {
		return d.Fabric
	}
	return defaultFabric()
}

// Dial connects to address; see DialContext.
func (d *Dialer) Dial(network, address string) (*rnet.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to a Listener at address, as Fabric.DialContext
// does, with the dialling end configured by d.Config. An invalid Config
// fails the dial, as it fails an rnet.Dialer's.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (*rnet.Conn, error) {
	return d.fabric().dial(ctx, network, address, d.Config)
}

// DialConn is DialContext returning a net.Conn, with net.Dialer's
// DialContext signature, as Fabric.DialConn is.
func (d *Dialer) DialConn(ctx context.Context, network, address string) (net.Conn, error) {
	if rdmaNet, ok := rnet.RDMANetwork(network); ok {
		network = rdmaNet
	}
	c, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err // not a nil *rnet.Conn in a non-nil net.Conn
	}
	return c, nil
}
