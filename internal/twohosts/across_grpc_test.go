package twohosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/hostlab"
	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnetgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A call names its payloads by metadata: the seed of the request's and
// responses' patterns and the request's size, so that the server checks
// every byte it received and the client every byte that came back.
const (
	seedKey = "across-seed"
	sizeKey = "across-size"
)

// serverHostEnv names the host a guest test's server runs on, as that
// host's hostname (scripts/softroce/guest-host.sh names them rnet-a and
// rnet-b).
const serverHostEnv = "RNET_ACROSS_SERVER_HOST"

func init() { roles["across-grpc-server"] = grpcServerRole }

// TestGRPCBetweenHosts: a gRPC server over rnet on host B, unary and
// server-streaming calls from host A over IPv4 and IPv6, every payload
// checked at both ends.
func TestGRPCBetweenHosts(t *testing.T) {
	needLab(t)
	l := labFor(t, hostlab.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	server, addrs := startServerRole(t, ctx, l.B, "across-grpc-server")
	runAcrossGuest(t, ctx, l.A, "TestAcrossGuestGRPC", targetsEnv(addrs), serverHostEnv+"=rnet-"+l.B.Name)
	stopServerRole(t, ctx, server, "across-grpc-server")
}

// TestAcrossGuestGRPC is TestGRPCBetweenHosts's client on host A.
func TestAcrossGuestGRPC(t *testing.T) {
	inGuest(t)
	for _, target := range acrossTargets(t) {
		t.Run(family(target), func(t *testing.T) {
			cc, err := grpc.NewClient(target.String(),
				rnetgrpc.DialOption(nil, rnetgrpc.WithLocalAddr(&rnet.Addr{AddrPort: netip.AddrPortFrom(hostAddr(t, target), 0)}), rnetgrpc.WithTimeout(30*time.Second)),
				grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			client := testgrpc.NewTestServiceClient(cc)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			t.Run("Unary", func(t *testing.T) {
				for i, sz := range [][2]int{{0, 0}, {1, 1 << 10}, {64 << 10, 100}, {100000, 3}, {1 << 20, 1 << 20}} {
					if err := unaryCall(ctx, client, uint64(100+i), sz[0], sz[1]); err != nil {
						t.Errorf("request %d B, response %d B: %v", sz[0], sz[1], err)
					}
				}
			})
			t.Run("UnaryConcurrent", func(t *testing.T) {
				var wg sync.WaitGroup
				errs := make(chan error, 16)
				for i := range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						errs <- unaryCall(ctx, client, uint64(200+i), 32<<10+i, 32<<10-i)
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						t.Error(err)
					}
				}
			})
			t.Run("ServerStreaming", func(t *testing.T) {
				if err := streamingCall(ctx, client, 300, 1000, 64); err != nil {
					t.Error(err)
				}
			})
		})
	}
}

// callContext carries seed and the request's size to the server.
func callContext(ctx context.Context, seed uint64, size int) context.Context {
	return metadata.AppendToOutgoingContext(ctx, seedKey, strconv.FormatUint(seed, 10), sizeKey, strconv.Itoa(size))
}

// unaryCall sends a request of in bytes and checks the response of out
// bytes and that B served it.
func unaryCall(ctx context.Context, client testgrpc.TestServiceClient, seed uint64, in, out int) error {
	resp, err := client.UnaryCall(callContext(ctx, seed, in), &testgrpc.SimpleRequest{
		ResponseSize: int32(out),
		Payload:      &testgrpc.Payload{Body: pattern(seed, in)},
	})
	if err != nil {
		return err
	}
	if want := os.Getenv(serverHostEnv); resp.GetHostname() != want {
		return fmt.Errorf("served by %q, want %q", resp.GetHostname(), want)
	}
	return checkPattern("response", seed+1, resp.GetPayload().GetBody(), out)
}

// streamingCall asks for n responses of sizes that vary up to 128 KiB and
// checks each and that no more come.
func streamingCall(ctx context.Context, client testgrpc.TestServiceClient, seed uint64, in, n int) error {
	req := &testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: pattern(seed, in)}}
	for i := range n {
		req.ResponseParameters = append(req.ResponseParameters, &testgrpc.ResponseParameters{Size: int32(responseSize(i))})
	}
	stream, err := client.StreamingOutputCall(callContext(ctx, seed, in), req)
	if err != nil {
		return err
	}
	for i := range n {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("response %d of %d: %w", i, n, err)
		}
		if err := checkPattern(fmt.Sprintf("response %d", i), responseSeed(seed, i), resp.GetPayload().GetBody(), responseSize(i)); err != nil {
			return err
		}
	}
	if _, err := stream.Recv(); err != io.EOF {
		return fmt.Errorf("after %d responses: %v, want io.EOF", n, err)
	}
	return nil
}

func responseSize(i int) int                 { return i * 2053 % (128 << 10) }
func responseSeed(seed uint64, i int) uint64 { return seed + 1 + uint64(i)<<32 }

// grpcServerRole serves testService on rnet listeners until SIGTERM.
func grpcServerRole() int {
	stop := terminated()
	lns, err := acrossListen()
	if err != nil {
		fmt.Fprintln(os.Stderr, "across-grpc-server:", err)
		return 1
	}
	host, _ := os.Hostname()
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, &testService{host: host})
	served := make(chan error, len(lns))
	for _, ln := range lns {
		go func() { served <- srv.Serve(ln) }()
	}
	code, serving := 0, len(lns)
	select {
	case <-stop:
	case err := <-served:
		fmt.Fprintln(os.Stderr, "across-grpc-server: Serve:", err)
		code, serving = 1, serving-1
	}
	srv.GracefulStop()
	for range serving {
		if err := <-served; err != nil {
			fmt.Fprintln(os.Stderr, "across-grpc-server: Serve:", err)
			code = 1
		}
	}
	return code
}

// testService answers with patterns named by the call's seed after checking
// the request's payload.
type testService struct {
	testgrpc.UnimplementedTestServiceServer
	host string
}

// checkRequest checks a request's payload against the call's metadata.
func checkRequest(ctx context.Context, body []byte) (uint64, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	seeds, sizes := md.Get(seedKey), md.Get(sizeKey)
	if len(seeds) != 1 || len(sizes) != 1 {
		return 0, status.Errorf(codes.InvalidArgument, "no %s or %s in the metadata", seedKey, sizeKey)
	}
	seed, err1 := strconv.ParseUint(seeds[0], 10, 64)
	size, err2 := strconv.Atoi(sizes[0])
	if err := errors.Join(err1, err2); err != nil {
		return 0, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := checkPattern("request", seed, body, size); err != nil {
		return 0, status.Error(codes.DataLoss, err.Error())
	}
	return seed, nil
}

func (s *testService) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	seed, err := checkRequest(ctx, req.GetPayload().GetBody())
	if err != nil {
		return nil, err
	}
	return &testgrpc.SimpleResponse{
		Payload:  &testgrpc.Payload{Body: pattern(seed+1, int(req.GetResponseSize()))},
		Hostname: s.host,
	}, nil
}

func (s *testService) StreamingOutputCall(req *testgrpc.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	seed, err := checkRequest(stream.Context(), req.GetPayload().GetBody())
	if err != nil {
		return err
	}
	for i, p := range req.GetResponseParameters() {
		body := pattern(responseSeed(seed, i), int(p.GetSize()))
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: body}}); err != nil {
			return err
		}
	}
	return nil
}
