//go:build linux && cgo

package rnet

import (
	"context"
	"io"
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
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "over "+Transport(r.Context().Value(connKey{}).(net.Conn))+" for "+r.URL.Path)
	}), ConnContext: func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, c)
	}}
	go srv.Serve(ln)
	defer srv.Close()

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
	for _, path := range []string{"/a", "/b"} {
		resp, err := client.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := "over rdma for " + path; err != nil || string(body) != want {
			t.Fatalf("GET %s = %q, %v; want %q", path, body, err, want)
		}
	}
	c := <-dialed
	if Transport(c) != "rdma" {
		t.Fatalf("DialConn(\"tcp\") made a %s connection, want rdma", Transport(c))
	}
	info, err := c.(*Conn).Info()
	if err != nil {
		t.Fatal(err)
	}
	s := ReadSockets()
	cs, ok := findConn(s, c.LocalAddr().String(), c.RemoteAddr().String())
	if !ok || cs.Transport != "rdma" || cs.Device != info.Device || cs.QPNumber != info.QPNumber || cs.BytesWritten == 0 || cs.BytesRead == 0 {
		t.Errorf("ReadSockets lists the client's connection as %+v (listed %t); want rdma on %s, queue pair %d, bytes both ways",
			cs, ok, info.Device, info.QPNumber)
	}
}
