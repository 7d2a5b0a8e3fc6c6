//go:build linux && cgo

package rnetgrpc_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnetgrpc"
)

// TestRXEDualListenerServesBoth: one gRPC server on a dual listener serves
// a client over RDMA and a client over plain TCP, each with its own
// connection open at once.
func TestRXEDualListenerServesBoth(t *testing.T) {
	pair := rdmatest.Require(t)
	ln := serveDual(t, pair.Server.String())
	if ln.RDMAError() != nil {
		t.Fatalf("no RDMA side: %v", ln.RDMAError())
	}
	overRDMA := rnetgrpc.Dialer(nil, rnetgrpc.WithLocalAddr(&rnet.Addr{AddrPort: netip.AddrPortFrom(pair.Client, 0)}), rnetgrpc.WithTCPFallback())
	overTCP := func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	type result struct {
		transport string
		err       error
	}
	done := make(chan result, 2)
	for _, dial := range []func(context.Context, string) (net.Conn, error){overRDMA, overTCP} {
		go func() {
			tr, err := checkHealth(ln.Addr().String(), dial)
			done <- result{tr, err}
		}()
	}
	got := map[string]bool{}
	for range 2 {
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		got[r.transport] = true
	}
	if !got["rdma"] || !got[""] {
		t.Errorf("the two clients went over %v, want rdma and plain TCP", got)
	}
}
