package rnet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
)

// TestHTTPTransportDialConn: Dialer.DialConn as http.Transport's
// DialContext, which dials "tcp": every request reaches a dual listener
// (over TCP here, where there is no device) and a network that is neither
// TCP nor RDMA is still refused.
func TestHTTPTransportDialConn(t *testing.T) {
	withoutRDMA(t)
	ln, err := (&ListenConfig{}).ListenDual(context.Background(), "rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveTransport(t, ln)

	d := &Dialer{TCPFallback: true}
	client := &http.Client{Transport: &http.Transport{DialContext: d.DialConn}}
	defer client.CloseIdleConnections()
	getOver(t, client, ln.Addr().String(), "tcp", "/a", "/b")

	for _, network := range []string{"tcp", "tcp4"} {
		if _, err := (&Dialer{}).DialConn(context.Background(), network, ln.Addr().String()); err == nil ||
			(!errors.Is(err, ErrNoDevice) && !errors.Is(err, ErrNotSupported)) {
			t.Errorf("DialConn(%q) without TCPFallback = %v; want the RDMA attempt's error", network, err)
		}
	}
	var unknown net.UnknownNetworkError
	if _, err := d.DialConn(context.Background(), "udp", ln.Addr().String()); !errors.As(err, &unknown) {
		t.Errorf("DialConn(\"udp\") = %v; want an UnknownNetworkError", err)
	}
}

type connKey struct{}

// serveTransport serves HTTP on ln until the test ends, answering each
// request with the transport of the connection it came on and its path.
func serveTransport(t *testing.T, ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "over "+Transport(r.Context().Value(connKey{}).(net.Conn))+" for "+r.URL.Path)
	}), ConnContext: func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, c)
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// getOver GETs each path from serveTransport's server at addr and checks
// that it came over transport.
func getOver(t *testing.T, client *http.Client, addr, transport string, paths ...string) {
	t.Helper()
	for _, path := range paths {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := "over " + transport + " for " + path; err != nil || string(body) != want {
			t.Fatalf("GET %s = %q, %v; want %q", path, body, err, want)
		}
	}
}

func TestRDMANetwork(t *testing.T) {
	for in, want := range map[string]string{"tcp": "rdma", "rdma": "rdma", "tcp4": "rdma4", "rdma4": "rdma4", "tcp6": "rdma6", "rdma6": "rdma6", "udp": "", "unix": ""} {
		got, ok := RDMANetwork(in)
		if got != want || ok != (want != "") {
			t.Errorf("RDMANetwork(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
