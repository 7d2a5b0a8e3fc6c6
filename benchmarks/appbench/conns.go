package main

import (
	"context"
	"net"

	"github.com/rnet-dev/rnet/rnet"
)

// transport makes the listeners and connections of one side, over rnet or
// over TCP, and keeps the rnet connections it makes for their counters.
type transport struct {
	tcp   bool
	from  net.IP // the client's local address; nil lets the system choose
	conns connSet
	// listen and dial replace the real ones in tests (rnettest's fabric).
	listen func(network, addr string) (net.Listener, error)
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
}

func (t *transport) name() string {
	if t.tcp {
		return "tcp"
	}
	return "rdma"
}

// Listen listens on addr and tracks the rnet connections it accepts.
func (t *transport) Listen(addr string) (net.Listener, error) {
	var ln net.Listener
	var err error
	switch {
	case t.listen != nil:
		ln, err = t.listen(t.network(), addr)
	case t.tcp:
		ln, err = net.Listen("tcp", addr)
	default:
		ln, err = rnet.Listen("rdma", addr)
	}
	if err != nil {
		return nil, err
	}
	return &trackingListener{Listener: ln, t: t}, nil
}

func (t *transport) network() string {
	if t.tcp {
		return "tcp"
	}
	return "rdma"
}

// Dial connects to addr; its signature is http.Transport.DialContext's and,
// without the network, grpc.WithContextDialer's.
func (t *transport) Dial(ctx context.Context, _, addr string) (net.Conn, error) {
	var c net.Conn
	var err error
	switch {
	case t.dial != nil:
		c, err = t.dial(ctx, t.network(), addr)
	case t.tcp:
		d := net.Dialer{}
		if t.from != nil {
			d.LocalAddr = &net.TCPAddr{IP: t.from}
		}
		c, err = d.DialContext(ctx, "tcp", addr)
	default:
		d := rnet.Dialer{}
		if t.from != nil {
			d.LocalAddr = &net.TCPAddr{IP: t.from}
		}
		c, err = d.DialContext(ctx, "rdma", addr)
	}
	if err != nil {
		return nil, err
	}
	t.track(c)
	return c, nil
}

func (t *transport) track(c net.Conn) {
	if rc, ok := c.(*rnet.Conn); ok {
		t.conns.add(rc)
	}
}

// trackingListener is a listener whose rnet connections are counted.
type trackingListener struct {
	net.Listener
	t *transport
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.t.track(c)
	}
	return c, err
}
