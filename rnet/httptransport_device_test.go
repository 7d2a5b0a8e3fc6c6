//go:build linux && cgo

package rnet

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// TestRXEHTTPTransportDialConn: http.Transport{DialContext: d.DialConn},
// which dials "tcp", reaches a dual listener on a device over RDMA, and
// stat's view of the process (ReadSockets) lists the request's connection
// on the device.
func TestRXEHTTPTransportDialConn(t *testing.T) {
	pair := rdmatest.Require(t)
	ln, err := (&ListenConfig{}).ListenDual(context.Background(), "rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	serveTransport(t, ln)

	local := netip.AddrPortFrom(pair.Client, 0)
	d := &Dialer{LocalAddr: &Addr{local}, TCPFallback: true, Timeout: time.Minute}
	dialed := make(chan net.Conn, 2)
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := d.DialConn(ctx, network, address)
		if err == nil {
			dialed <- c
		}
		return c, err
	}}}
	defer client.CloseIdleConnections()
	getOver(t, client, ln.Addr().String(), "rdma", "/a", "/b")
	c := <-dialed
	if Transport(c) != "rdma" {
		t.Fatalf("DialConn(\"tcp\") made a %s connection, want rdma", Transport(c))
	}
	info, err := c.(*Conn).Info()
	if err != nil {
		t.Fatal(err)
	}
	s := ReadSockets(0)
	cs, ok := findConn(s, c.LocalAddr().String(), c.RemoteAddr().String())
	if !ok || cs.Transport != "rdma" || cs.Device != info.Device || cs.QPNumber != info.QPNumber || cs.BytesWritten == 0 || cs.BytesRead == 0 {
		t.Errorf("ReadSockets lists the client's connection as %+v (listed %t); want rdma on %s, queue pair %d, bytes both ways",
			cs, ok, info.Device, info.QPNumber)
	}
}
