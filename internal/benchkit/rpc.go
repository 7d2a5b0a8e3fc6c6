package benchkit

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
)

// DialFunc connects to the server of a benchmark (addr is the listener's).
type DialFunc func(ctx context.Context, addr string) (net.Conn, error)

// rawCodec carries *[]byte messages unchanged, so the benchmarks measure the
// transport and gRPC, not protobuf.
type rawCodec struct{}

const codecName = "rnet-bench-raw"

func (rawCodec) Name() string { return codecName }
func (rawCodec) Marshal(v any) ([]byte, error) {
	p, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("benchkit codec: cannot marshal %T", v)
	}
	return *p, nil
}
func (rawCodec) Unmarshal(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("benchkit codec: cannot unmarshal into %T", v)
	}
	*p = append((*p)[:0], data...)
	return nil
}

func init() { encoding.RegisterCodec(rawCodec{}) }

// The service rnet.bench.Echo: Unary echoes; Stream echoes every message.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "rnet.bench.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Unary",
		Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			return &in, nil
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Stream",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(_ any, st grpc.ServerStream) error {
			var m []byte
			for {
				if err := st.RecvMsg(&m); err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
				if err := st.SendMsg(&m); err != nil {
					return err
				}
			}
		},
	}},
}

func grpcPair(b *testing.B, ln net.Listener, dial DialFunc) *grpc.ClientConn {
	b.Helper()
	srv := grpc.NewServer()
	srv.RegisterService(&echoDesc, struct{}{})
	go srv.Serve(ln)
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithContextDialer(dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(codecName)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close(); srv.Stop() })
	return cc
}

// GRPCUnary measures unary calls carrying size bytes each way; one op is one call.
func GRPCUnary(b *testing.B, ln net.Listener, dial DialFunc, size int, cs Counters) {
	cc := grpcPair(b, ln, dial)
	ctx := context.Background()
	in, out := make([]byte, size), make([]byte, 0, size)
	// The first call connects; keep it out of the measurement.
	if err := cc.Invoke(ctx, "/rnet.bench.Echo/Unary", &in, &out); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cs.begin()
	for i := 0; i < b.N; i++ {
		if err := cc.Invoke(ctx, "/rnet.bench.Echo/Unary", &in, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cs.report(b, c0)
}

// GRPCStream measures a bidirectional stream: one op is one message of size
// bytes sent and its echo received.
func GRPCStream(b *testing.B, ln net.Listener, dial DialFunc, size int, cs Counters) {
	cc := grpcPair(b, ln, dial)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := cc.NewStream(ctx, &echoDesc.Streams[0], "/rnet.bench.Echo/Stream")
	if err != nil {
		b.Fatal(err)
	}
	in, out := make([]byte, size), make([]byte, 0, size)
	if err := st.SendMsg(&in); err != nil {
		b.Fatal(err)
	}
	if err := st.RecvMsg(&out); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	n := b.N
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cs.begin()
	go func() {
		var m []byte
		for i := 0; i < n; i++ {
			if err := st.RecvMsg(&m); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := 0; i < n; i++ {
		if err := st.SendMsg(&in); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	st.CloseSend()
	cs.report(b, c0)
}

// HTTP measures GET requests whose responses carry size bytes, over one
// keep-alive connection; one op is one request.
func HTTP(b *testing.B, ln net.Listener, dial DialFunc, size int, cs Counters) {
	body := make([]byte, size)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})}
	go srv.Serve(ln)
	tr := &http.Transport{
		DialContext:         func(ctx context.Context, _, addr string) (net.Conn, error) { return dial(ctx, addr) },
		MaxIdleConnsPerHost: 1,
		DisableCompression:  true,
	}
	b.Cleanup(func() { tr.CloseIdleConnections(); srv.Close() })
	client := &http.Client{Transport: tr}
	url := "http://" + ln.Addr().String() + "/"
	buf := make([]byte, 32<<10)
	get := func() {
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{resp.Body}, buf)
		resp.Body.Close()
		if err != nil || n != int64(size) {
			b.Fatalf("GET: %d bytes, %v", n, err)
		}
	}
	get()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cs.begin()
	for i := 0; i < b.N; i++ {
		get()
	}
	b.StopTimer()
	cs.report(b, c0)
}
