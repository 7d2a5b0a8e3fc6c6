//go:build linux && cgo

package rnetgrpc_test

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnetgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// interopCases are grpc-go's interop client cases, each run against
// interop.NewTestServer over an rnet listener and rnetgrpc.DialOption.
var interopCases = map[string]func(ctx context.Context, cc *grpc.ClientConn){
	"empty_unary": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoEmptyUnaryCall(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"large_unary": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoLargeUnaryCall(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"client_streaming": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoClientStreaming(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"server_streaming": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoServerStreaming(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"ping_pong": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoPingPong(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"empty_stream": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoEmptyStream(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"timeout_on_sleeping_server": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoTimeoutOnSleepingServer(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"cancel_after_begin": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoCancelAfterBegin(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"cancel_after_first_response": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoCancelAfterFirstResponse(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"status_code_and_message": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoStatusCodeAndMessage(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"special_status_message": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoSpecialStatusMessage(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"custom_metadata": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoCustomMetadata(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"unimplemented_method": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoUnimplementedMethod(ctx, cc)
	},
	"unimplemented_service": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoUnimplementedService(ctx, testgrpc.NewUnimplementedServiceClient(cc))
	},
}

// The interop cases report a failure through grpclog.Fatal, which exits the
// process. So each case runs in a child process (this test binary again,
// running TestInteropChild), and a non-zero exit fails the sub-test with the
// child's output.
const (
	childCaseEnv   = "RNETGRPC_INTEROP_CASE"
	childSchemeEnv = "RNETGRPC_INTEROP_SCHEME"
)

func TestInterop(t *testing.T) {
	rdmatest.Require(t)
	if os.Getenv(childCaseEnv) != "" {
		t.Skip("in a child")
	}
	type run struct{ name, scheme string }
	var runs []run
	for name := range interopCases {
		runs = append(runs, run{name, "dns"})
	}
	// The passthrough scheme hands the literal target to the dialer.
	runs = append(runs, run{"empty_unary", "passthrough"}, run{"large_unary", "passthrough"}, run{"ping_pong", "passthrough"})
	for _, r := range runs {
		t.Run(r.scheme+"/"+r.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestInteropChild$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), childCaseEnv+"="+r.name, childSchemeEnv+"="+r.scheme)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("interop case %s (%s scheme) failed: %v\n%s", r.name, r.scheme, err, out)
			}
			if !strings.Contains(string(out), "interop case "+r.name+" passed") {
				t.Fatalf("interop case %s did not report success:\n%s", r.name, out)
			}
		})
	}
}

// TestInteropChild runs one interop case, chosen by the environment; it is a
// no-op unless TestInterop started it.
func TestInteropChild(t *testing.T) {
	name := os.Getenv(childCaseEnv)
	if name == "" {
		t.Skip("run by TestInterop")
	}
	pair := rdmatest.Require(t)
	do, ok := interopCases[name]
	if !ok {
		t.Fatalf("unknown interop case %q", name)
	}
	ln, err := rnet.Listen("rdma", net.JoinHostPort(pair.Server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, interop.NewTestServer())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	target := ln.Addr().String()
	if s := os.Getenv(childSchemeEnv); s == "passthrough" {
		target = "passthrough:///" + target
	}
	cc, err := grpc.NewClient(target,
		rnetgrpc.DialOption(nil, rnetgrpc.WithLocalAddr(&rnet.Addr{AddrPort: netip.AddrPortFrom(pair.Client, 0)})),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	do(ctx, cc)
	if err := cc.Close(); err != nil {
		t.Errorf("ClientConn.Close: %v", err)
	}
	srv.Stop()
	if err := <-served; err != nil {
		t.Errorf("Serve returned %v", err)
	}
	t.Logf("interop case %s passed", name)
}
