package rnetgrpc_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnetgrpc"
	"github.com/rnet-dev/rnet/rnet/rnettest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// recordingFabric is an rnettest.Fabric that keeps the connections dialled
// through it.
type recordingFabric struct {
	*rnettest.Fabric
	mu    sync.Mutex
	conns []*rnet.Conn
}

func (f *recordingFabric) DialConn(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := f.Fabric.DialConn(ctx, network, address)
	if err == nil {
		f.mu.Lock()
		f.conns = append(f.conns, c.(*rnet.Conn))
		f.mu.Unlock()
	}
	return c, err
}

func (f *recordingFabric) dialled() []*rnet.Conn {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*rnet.Conn(nil), f.conns...)
}

// rnettest's faults drive a gRPC client's error path: a call on a cut
// connection fails as Unavailable, and the client dials again and the next
// call, waiting for the new connection, succeeds.
func TestGRPCClientRetriesAfterCut(t *testing.T) {
	f := &recordingFabric{Fabric: rnettest.NewFabric(nil)}
	ln, err := f.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	var served sync.WaitGroup
	served.Go(func() { srv.Serve(ln) })
	defer func() {
		srv.Stop()
		served.Wait()
	}()
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		rnetgrpc.FabricDialOption(f),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	first := f.dialled()
	if len(first) != 1 {
		t.Fatalf("%d connections dialled, want 1", len(first))
	}
	// A call blocked on the connection when it is cut fails as Unavailable.
	watch, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := f.Cut(first[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("a stream on a cut connection ended with %v, want Unavailable", err)
	}
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("a call after the cut, waiting for a new connection: %v", err)
	}
	if n := len(f.dialled()); n != 2 {
		t.Errorf("%d connections dialled, want 2: the first and the one after the cut", n)
	}
}
