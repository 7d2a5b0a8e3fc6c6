//go:build linux && cgo

package twohosts

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/rnet"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// gRPC across a wire cut (issue 43): a server on B with Config.Resume, and
// on A one gRPC connection with Config.Resume carrying a long server
// stream and a unary load at once. Wire 0, the one they run on, is cut
// mid-load and stays cut: no RPC may fail, gRPC must not connect again, and
// the connection must have resumed. Unlike the 100-stream resume tests it
// is not gated: one connection's resume does not starve its host.

func init() {
	roles["resume-grpc-server"] = resumeGRPCServer
	roles["resume-grpc-client"] = resumeGRPCClient
}

const (
	// resumeGRPCPort is the gRPC test's port, apart from the other
	// resume tests'.
	resumeGRPCPort = resumePort + 1
	// resumeGRPCCallers are the goroutines calling UnaryCall in a loop.
	resumeGRPCCallers = 8
	// resumeGRPCResponses and resumeGRPCInterval shape the server
	// stream: a response every interval, for longer than the cut takes
	// to heal.
	resumeGRPCResponses = 600
	resumeGRPCInterval  = 25 * time.Millisecond
	// resumeGRPCAfterMark is how many calls each caller completes after
	// the cut before the client ends the load.
	resumeGRPCAfterMark = 20
)

// resumeGRPCConfig is both ends' Config: the defaults and Resume.
func resumeGRPCConfig() *rnet.Config { return &rnet.Config{Resume: true} }

// resumeGRPCLogger logs rnet's records from info level (each resume, and
// warnings such as a refused resume) on the role's output.
func resumeGRPCLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// resumeGRPCServer serves testService with Config.Resume on B's every
// address until SIGTERM.
func resumeGRPCServer() int {
	stop := terminated()
	lc := rnet.ListenConfig{Config: resumeGRPCConfig(), Logger: resumeGRPCLogger()}
	ln, err := lc.Listen(context.Background(), "rdma", net.JoinHostPort("0.0.0.0", strconv.Itoa(resumeGRPCPort)))
	if err != nil {
		fmt.Println("listen failed:", err)
		return 1
	}
	host, _ := os.Hostname()
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, &pacedService{testService{host: host}})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Println("listening", ln.Addr())
	select {
	case <-stop:
		srv.GracefulStop()
		return 0
	case err := <-served:
		fmt.Println("serve failed:", err)
		return 1
	}
}

// pacedService is testService whose server stream waits each response's
// IntervalUs before sending it, so that the stream lasts across the cut.
type pacedService struct{ testService }

func (s *pacedService) StreamingOutputCall(req *testgrpc.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	seed, err := checkRequest(stream.Context(), req.GetPayload().GetBody())
	if err != nil {
		return err
	}
	for i, p := range req.GetResponseParameters() {
		// Pacing the load, not waiting for an event.
		time.Sleep(time.Duration(p.GetIntervalUs()) * time.Microsecond)
		body := pattern(responseSeed(seed, i), int(p.GetSize()))
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: body}}); err != nil {
			return err
		}
	}
	return nil
}

// resumeGRPCClient runs the load on one gRPC connection to FAULT_ADDR and
// prints "steady" once both parts of it flow; from a SIGUSR1 (the cut) on,
// it lets each caller complete resumeGRPCAfterMark more calls and the
// stream end, then prints "grpc-done" with what happened.
func resumeGRPCClient() int {
	marks := make(chan os.Signal, 1)
	signal.Notify(marks, syscall.SIGUSR1)
	d := &rnet.Dialer{Config: resumeGRPCConfig(), Timeout: time.Minute, Logger: resumeGRPCLogger()}
	var dials atomic.Int32
	var conns struct {
		sync.Mutex
		list []*rnet.Conn
	}
	cc, err := grpc.NewClient(os.Getenv("FAULT_ADDR"),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			dials.Add(1)
			c, err := d.DialContext(ctx, "rdma", addr)
			if err == nil {
				conns.Lock()
				conns.list = append(conns.list, c)
				conns.Unlock()
			}
			return c, err
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println("grpc.NewClient failed:", err)
		return 1
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var markedAt atomic.Int64 // unix nanoseconds of the mark, 0 before it
	var ok, failed atomic.Int64
	firstErr := make(chan error, 1)
	fail := func(err error) {
		failed.Add(1)
		select {
		case firstErr <- err:
		default:
		}
	}
	// afterMark counts each caller's calls that began after the mark;
	// resumedAt, when the last caller completed its first such call.
	afterMark := make([]atomic.Int64, resumeGRPCCallers)
	var movedCallers atomic.Int32
	var resumedAt atomic.Int64
	var callers sync.WaitGroup
	for i := range resumeGRPCCallers {
		callers.Add(1)
		go func() {
			defer callers.Done()
			for n := uint64(0); ctx.Err() == nil; n++ {
				began := time.Now().UnixNano()
				callCtx, callCancel := context.WithTimeout(ctx, 2*time.Minute)
				err := unaryCall(callCtx, client, uint64(i)<<40|n, 4<<10+i, 4<<10-i)
				callCancel()
				switch {
				case ctx.Err() != nil:
					return
				case err != nil:
					fail(fmt.Errorf("caller %d, call %d: %w", i, n, err))
					return
				}
				ok.Add(1)
				if m := markedAt.Load(); m != 0 && began > m {
					if afterMark[i].Add(1) == 1 && movedCallers.Add(1) == resumeGRPCCallers {
						resumedAt.Store(time.Now().UnixNano())
					}
				}
			}
		}()
	}
	streamDone := make(chan error, 1)
	var streamed atomic.Int64
	go func() { streamDone <- pacedStream(ctx, client, &streamed) }()

	for streamed.Load() < 20 || ok.Load() < 5*resumeGRPCCallers {
		select {
		case err := <-firstErr:
			fmt.Println("failed before the cut:", err)
			return 1
		case err := <-streamDone:
			fmt.Println("the stream ended before the cut:", err)
			return 1
		case <-time.After(50 * time.Millisecond): // polling progress counters
		}
	}
	fmt.Printf("steady calls=%d responses=%d\n", ok.Load(), streamed.Load())
	<-marks
	mark := time.Now()
	markedAt.Store(mark.UnixNano())
	fmt.Println("marked")

	// Until a failure, or the stream's end and every caller's calls
	// after the cut.
	var streamErr error
	streamOver := false
	tick := time.NewTicker(100 * time.Millisecond) // polling progress counters
	defer tick.Stop()
	for failed.Load() == 0 && (!streamOver || slowestAfterMark(afterMark) < resumeGRPCAfterMark) {
		select {
		case streamErr = <-streamDone:
			streamOver = true
		case <-tick.C:
		}
	}
	cancel()
	callers.Wait()
	resumes, devices := uint64(0), ""
	conns.Lock()
	for _, c := range conns.list {
		resumes += c.Stats().Resumes
		if info, err := c.Info(); err == nil {
			devices += info.Device + " "
		}
	}
	conns.Unlock()
	moved := time.Duration(0)
	if r := resumedAt.Load(); r != 0 {
		moved = time.Unix(0, r).Sub(mark)
	}
	var why error
	select {
	case why = <-firstErr:
	default:
	}
	fmt.Printf("grpc-done calls=%d failed=%d dials=%d resumes=%d moved=%v stream=%v responses=%d devices=%s first-error=%v\n",
		ok.Load(), failed.Load(), dials.Load(), resumes, moved.Round(time.Millisecond), streamErr, streamed.Load(), devices, why)
	return 0
}

// slowestAfterMark is the fewest calls a caller began after the mark and
// completed.
func slowestAfterMark(counts []atomic.Int64) int64 {
	least := int64(1 << 62)
	for i := range counts {
		least = min(least, counts[i].Load())
	}
	return least
}

// pacedStream asks for resumeGRPCResponses responses, one every
// resumeGRPCInterval, and checks each and that no more come; streamed
// counts them.
func pacedStream(ctx context.Context, client testgrpc.TestServiceClient, streamed *atomic.Int64) error {
	const seed = 7 << 50
	req := &testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: pattern(seed, 100)}}
	for i := range resumeGRPCResponses {
		req.ResponseParameters = append(req.ResponseParameters, &testgrpc.ResponseParameters{
			Size: int32(responseSize(i) % (16 << 10)), IntervalUs: int32(resumeGRPCInterval / time.Microsecond)})
	}
	stream, err := client.StreamingOutputCall(callContext(ctx, seed, 100), req)
	if err != nil {
		return err
	}
	for i := range resumeGRPCResponses {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("response %d of %d: %w", i, resumeGRPCResponses, err)
		}
		if err := checkPattern(fmt.Sprintf("response %d", i), responseSeed(seed, i), resp.GetPayload().GetBody(), responseSize(i)%(16<<10)); err != nil {
			return err
		}
		streamed.Add(1)
	}
	if _, err := stream.Recv(); err != io.EOF {
		return fmt.Errorf("after %d responses: %v, want io.EOF", resumeGRPCResponses, err)
	}
	return nil
}

// TestRXEResumeGRPCAcrossWireCut: the wire a gRPC connection runs on is cut
// for good while a server stream and eight callers of a unary method use
// it: no RPC fails, every payload is checked, gRPC dials once, and the
// connection resumes over the other wire.
func TestRXEResumeGRPCAcrossWireCut(t *testing.T) {
	needLab(t)
	l := resumeLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	server := startRole(t, l.B, "resume-grpc-server")
	waitLine(t, ctx, server, "listening")
	client := startRole(t, l.A, "resume-grpc-client",
		"FAULT_ADDR="+net.JoinHostPort(l.B.Addr(0).String(), strconv.Itoa(resumeGRPCPort)), serverHostEnv+"=rnet-"+l.B.Name)
	waitLine(t, ctx, client, "steady ")
	if err := l.Wire(0).Cut(); err != nil {
		t.Fatal(err)
	}
	defer l.Wire(0).Restore()
	if err := client.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	line := waitLine(t, ctx, client, "grpc-done ")
	t.Logf("wire 0 cut under gRPC: %s", line)
	if n := intField(t, line, "failed"); n != 0 {
		t.Errorf("%d RPCs failed across the cut: %s", n, line)
	}
	if s, _ := field(line, "stream"); s != "<nil>" {
		t.Errorf("the server stream failed across the cut: %s", line)
	}
	if n := intField(t, line, "dials"); n != 1 {
		t.Errorf("gRPC dialled %d times, want 1: the connection did not outlive its path", n)
	}
	if n := intField(t, line, "resumes"); n < 1 {
		t.Errorf("the connection did not resume: %s", line)
	}
	if err := client.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	stopServerRole(t, ctx, server, "resume-grpc-server")
}
