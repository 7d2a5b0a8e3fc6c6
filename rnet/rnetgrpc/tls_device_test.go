//go:build linux && cgo

package rnetgrpc_test

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/testcert"
	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnetgrpc"
)

// TestRXEGRPCWithTLS: gRPC with credentials.NewTLS on both ends runs over
// rnet: the call goes over an RDMA connection, and both ends see TLS 1.3
// with h2 negotiated.
func TestRXEGRPCWithTLS(t *testing.T) {
	pair := rdmatest.Require(t)
	serverCfg, clientCfg := testcert.New(t, pair.Server.String())
	ln, err := rnet.Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hs := health.NewServer()
	var serverSaw credentials.TLSInfo
	var serverSawOK bool
	var mu sync.Mutex
	s := grpc.NewServer(grpc.Creds(credentials.NewTLS(serverCfg)),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if p, ok := peer.FromContext(ctx); ok {
				mu.Lock()
				serverSaw, serverSawOK = p.AuthInfo.(credentials.TLSInfo)
				mu.Unlock()
			}
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(s, hs)
	var wg sync.WaitGroup
	wg.Go(func() { s.Serve(ln) })
	defer wg.Wait()
	defer s.Stop()

	var transport string
	dial := rnetgrpc.Dialer(nil, rnetgrpc.WithLocalAddr(&rnet.Addr{AddrPort: netip.AddrPortFrom(pair.Client, 0)}))
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(credentials.NewTLS(clientCfg)),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := dial(ctx, addr)
			if err == nil {
				mu.Lock()
				transport = rnet.Transport(c)
				mu.Unlock()
			}
			return c, err
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	var p peer.Peer
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health check: %v", resp.Status)
	}
	clientSaw, ok := p.AuthInfo.(credentials.TLSInfo)
	mu.Lock()
	defer mu.Unlock()
	if transport != "rdma" {
		t.Errorf("the call went over %q, want rdma", transport)
	}
	for end, st := range map[string]struct {
		info credentials.TLSInfo
		ok   bool
	}{"client": {clientSaw, ok}, "server": {serverSaw, serverSawOK}} {
		if !st.ok || st.info.State.Version != 0x0304 || st.info.State.NegotiatedProtocol != "h2" {
			t.Errorf("%s: auth info %v (TLS: %v), version %x, protocol %q; want TLS 1.3 with h2", end, st.info.AuthType(), st.ok, st.info.State.Version, st.info.State.NegotiatedProtocol)
		}
	}
}
