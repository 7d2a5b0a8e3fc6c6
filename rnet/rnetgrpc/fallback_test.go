package rnetgrpc_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnetgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// serveDual serves gRPC's health service on a dual listener at host, port 0,
// until the test ends.
func serveDual(t *testing.T, host string) *rnet.DualListener {
	t.Helper()
	ln, err := (&rnet.ListenConfig{}).ListenDual(context.Background(), "rdma", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.Serve(ln)
	}()
	t.Cleanup(func() {
		s.Stop()
		wg.Wait()
		ln.Close()
	})
	return ln
}

// checkHealth makes one gRPC round trip to addr through dial and returns
// the transport of the connection it went over ("" for a plain TCP one).
// It may run on any goroutine.
func checkHealth(addr string, dial func(context.Context, string) (net.Conn, error)) (string, error) {
	var mu sync.Mutex
	transport := ""
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			c, err := dial(ctx, a)
			if err == nil {
				mu.Lock()
				transport = rnet.Transport(c)
				mu.Unlock()
			}
			return c, err
		}))
	if err != nil {
		return "", err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return "", err
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		return "", fmt.Errorf("health check: %v", resp.Status)
	}
	mu.Lock()
	defer mu.Unlock()
	return transport, nil
}

// TestFallbackWithoutRDMA: on a machine without RDMA a gRPC client with
// WithTCPFallback reaches a server on a dual listener, over TCP.
func TestFallbackWithoutRDMA(t *testing.T) {
	if _, err := verbs.Devices(); err == nil {
		t.Skip("this machine has RDMA devices")
	}
	ln := serveDual(t, "127.0.0.1")
	got, err := checkHealth(ln.Addr().String(), rnetgrpc.Dialer(nil, rnetgrpc.WithTCPFallback()))
	if err != nil {
		t.Fatal(err)
	}
	if got != "tcp" {
		t.Errorf("the round trip went over %q, want tcp", got)
	}
}
