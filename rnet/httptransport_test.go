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
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "over "+Transport(r.Context().Value(connKey{}).(net.Conn))+" for "+r.URL.Path)
	}), ConnContext: func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, c)
	}}
	go srv.Serve(ln)
	defer srv.Close()

	d := &Dialer{TCPFallback: true}
	client := &http.Client{Transport: &http.Transport{DialContext: d.DialConn}}
	defer client.CloseIdleConnections()
	for _, path := range []string{"/a", "/b"} {
		resp, err := client.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != "over tcp for "+path {
			t.Fatalf("GET %s = %q, %v; want %q", path, body, err, "over tcp for "+path)
		}
	}

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

func TestRDMANetwork(t *testing.T) {
	for in, want := range map[string]string{"tcp": "rdma", "rdma": "rdma", "tcp4": "rdma4", "rdma4": "rdma4", "tcp6": "rdma6", "rdma6": "rdma6", "udp": "", "unix": ""} {
		got, ok := RDMANetwork(in)
		if got != want || ok != (want != "") {
			t.Errorf("RDMANetwork(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
