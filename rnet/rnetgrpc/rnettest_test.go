package rnetgrpc_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnettest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// gRPC over package rnettest's in-memory connections, on any host: the
// server serves a real *rnet.Listener, the client dials real *rnet.Conns
// through a context dialer, as a user's tests would.
func TestGRPCOverRnettest(t *testing.T) {
	f := rnettest.NewFabric(nil)
	ln, err := f.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthSrv := health.NewServer()
	healthpb.RegisterHealthServer(srv, healthSrv)
	var served sync.WaitGroup
	served.Go(func() { srv.Serve(ln) })
	defer func() {
		srv.Stop() // closes ln and every accepted connection
		served.Wait()
	}()

	var transports []string
	var mu sync.Mutex
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := f.DialContext(ctx, "rdma", addr)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			transports = append(transports, rnet.Transport(c))
			mu.Unlock()
			return c, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := healthpb.NewHealthClient(cc)
	resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("unary Check over rnettest: %v", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check = %v, want SERVING", resp.GetStatus())
	}

	// A server stream: the first status, then the change the server makes.
	watch, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first Watch status = %v, %v; want SERVING", r.GetStatus(), err)
	}
	healthSrv.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("second Watch status = %v, %v; want NOT_SERVING", r.GetStatus(), err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(transports) == 0 || transports[0] != "rdma" {
		t.Fatalf("connections went over %v, want rnet's rdma transport", transports)
	}
}
