// Command grpc runs a small gRPC service over rnet, or over TCP with -tcp:
// a unary call and two streaming calls, with latency and throughput figures.
//
//	grpc -s -addr 10.77.0.2:50051                  # server
//	grpc -c -addr 10.77.0.2:50051 -size 64 -n 2000 # client
//
// With -tls both ends use gRPC's TLS credentials. The server serves the
// certificate in -cert with the key in -key, or, without -key, makes a
// self-signed one at start and writes the certificate (not the key) to
// -cert; the client trusts the certificates in -cert:
//
//	grpc -s -tls -cert /tmp/grpc.pem -addr 10.77.0.2:50051
//	grpc -c -tls -cert /tmp/grpc.pem -addr 10.77.0.2:50051
//
// The service, rnet.examples.Echo, is declared by hand with grpc.ServiceDesc
// and carries raw bytes through a tiny codec, so the example needs no protoc:
//
//	Unary(bytes) bytes                   answers with the request
//	Download(count, size) stream bytes   sends count messages of size bytes
//	Upload(stream bytes) total           counts the bytes it received
//
// Over RDMA, the server calls grpcServer.Serve(rnetListener) and the client
// adds rnetgrpc.DialOption(nil) to grpc.NewClient: that is the whole change.
// The client's last line is machine-readable:
//
//	RESULT grpc net=rdma tls=off size=64 count=2000 p50_us=... p99_us=... mean_us=... download_MBps=... upload_MBps=...
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"

	"github.com/rnet-dev/rnet/examples/internal/exutil"
	"github.com/rnet-dev/rnet/rnet/rnetgrpc"
)

func main() {
	server := flag.Bool("s", false, "run the server")
	client := flag.Bool("c", false, "run the client")
	addr := flag.String("addr", "10.77.0.2:50051", "server address: listen on it (-s), or the gRPC target to call (-c)")
	from := flag.String("from", "", "client: local IP address to connect from (it picks the RDMA device)")
	size := flag.Int("size", 64, "client: unary request size in bytes")
	count := flag.Int("n", 2000, "client: number of unary calls")
	streamMiB := flag.Int("stream-mib", 16, "client: MiB to download and to upload through the streaming calls, in 64 KiB messages")
	tcp := flag.Bool("tcp", false, "use TCP instead of RDMA")
	once := flag.Bool("once", false, "server: exit after the first client connection closes")
	useTLS := flag.Bool("tls", false, "use TLS (gRPC's credentials.NewTLS)")
	certFile := flag.String("cert", "", "with -tls: server: the certificate to serve, or the file to write a self-signed one to (without -key); client: the certificates to trust")
	keyFile := flag.String("key", "", "with -tls: server: the certificate's private key")
	flag.Parse()

	switch {
	case *server == *client:
		fmt.Fprintln(os.Stderr, "grpc: pass exactly one of -s (server) or -c (client)")
		flag.Usage()
		os.Exit(2)
	case *server:
		creds := insecure.NewCredentials()
		if *useTLS {
			var err error
			if creds, err = serverTLS(*addr, *certFile, *keyFile); err != nil {
				exutil.Fatal("grpc", *tcp, err)
			}
		}
		if err := serve(*tcp, *addr, *once, creds); err != nil {
			exutil.Fatal("grpc", *tcp, err)
		}
	default:
		if *size < 0 || *count <= 0 || *streamMiB < 0 {
			fmt.Fprintln(os.Stderr, "grpc: -n must be positive, -size and -stream-mib not negative")
			os.Exit(2)
		}
		creds := insecure.NewCredentials()
		if *useTLS {
			var err error
			if creds, err = clientTLS(*certFile); err != nil {
				exutil.Fatal("grpc", *tcp, err)
			}
		}
		if err := run(*tcp, *addr, *from, *size, *count, *streamMiB<<20, creds); err != nil {
			exutil.Fatal("grpc", *tcp, err)
		}
	}
}

// rawCodec passes []byte messages through unchanged.
type rawCodec struct{}

func (rawCodec) Name() string { return "rnet-raw" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}
	return nil, fmt.Errorf("rnet-raw codec: cannot marshal %T", v)
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	if b, ok := v.(*[]byte); ok {
		*b = append((*b)[:0], data...) // gRPC may reuse data after we return
		return nil
	}
	return fmt.Errorf("rnet-raw codec: cannot unmarshal into %T", v)
}

func init() { encoding.RegisterCodec(rawCodec{}) }

const chunk = 64 << 10

var echoService = grpc.ServiceDesc{
	ServiceName: "rnet.examples.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Unary",
		Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var req []byte
			if err := dec(&req); err != nil {
				return nil, err
			}
			return &req, nil
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Download",
		ServerStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			var req []byte
			if err := stream.RecvMsg(&req); err != nil {
				return err
			}
			if len(req) != 8 {
				return errors.New("Download wants 8 bytes: count and size")
			}
			count, size := binary.BigEndian.Uint32(req), binary.BigEndian.Uint32(req[4:])
			msg := pattern(int(size))
			for range count {
				if err := stream.SendMsg(&msg); err != nil {
					return err
				}
			}
			return nil
		},
	}, {
		StreamName:    "Upload",
		ClientStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			var total uint64
			var msg []byte
			for {
				err := stream.RecvMsg(&msg)
				if err == io.EOF {
					break
				}
				if err != nil {
					return err
				}
				total += uint64(len(msg))
			}
			resp := binary.BigEndian.AppendUint64(nil, total)
			return stream.SendMsg(&resp)
		},
	}},
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b
}

func serve(tcp bool, addr string, once bool, creds credentials.TransportCredentials) error {
	ln, err := exutil.Listen(tcp, addr)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.Creds(creds))
	srv.RegisterService(&echoService, nil)
	fmt.Printf("grpc: serving rnet.examples.Echo on %s (%s, %s)\n", ln.Addr(), exutil.Network(tcp), creds.Info().SecurityProtocol)
	if once {
		ol := &onceListener{Listener: ln, connClosed: make(chan struct{}), closed: make(chan struct{})}
		go func() {
			<-ol.connClosed
			srv.GracefulStop()
		}()
		ln = ol
	}
	return srv.Serve(ln) // nil after GracefulStop
}

// onceListener accepts one connection; when that connection closes,
// connClosed is closed. Later Accepts wait until the listener is closed.
type onceListener struct {
	net.Listener
	accepted   atomic.Bool
	connClosed chan struct{}
	closeOnce  sync.Once
	closed     chan struct{}
}

func (l *onceListener) Accept() (net.Conn, error) {
	if l.accepted.Swap(true) {
		<-l.closed
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &notifyConn{Conn: c, closed: l.connClosed}, nil
}

func (l *onceListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

type notifyConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *notifyConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}

func run(tcp bool, target, from string, size, count, streamBytes int, creds credentials.TransportCredentials) error {
	dial, err := exutil.Dialer(tcp, from)
	if err != nil {
		return err
	}
	var dialOpt grpc.DialOption
	// lastDialErr keeps the latest connect error, so that a failure to
	// connect is reported as itself (gRPC's status only has its text).
	var lastDialErr atomic.Pointer[error]
	if tcp {
		dialOpt = grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := dial(ctx, addr)
			if err != nil {
				lastDialErr.Store(&err)
			}
			return c, err
		})
	} else {
		// An application only adds rnetgrpc.DialOption(nil) to run over
		// RDMA. This one also passes -from, which picks the device, and
		// composes rnetgrpc.Dialer with its own grpc.WithContextDialer to
		// keep the connect error.
		var opts []rnetgrpc.Option
		if from != "" {
			local, err := net.ResolveIPAddr("ip", from)
			if err != nil {
				return err
			}
			opts = append(opts, rnetgrpc.WithLocalAddr(local))
		}
		rdmaDial := rnetgrpc.Dialer(nil, opts...)
		dialOpt = grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := rdmaDial(ctx, addr)
			if err != nil {
				lastDialErr.Store(&err)
			}
			return c, err
		})
	}
	cc, err := grpc.NewClient(target, dialOpt,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(rawCodec{}.Name())))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// Unary: the first call also connects.
	req := pattern(size)
	var resp []byte
	t0 := time.Now()
	if err := cc.Invoke(ctx, "/rnet.examples.Echo/Unary", &req, &resp); err != nil {
		if derr := lastDialErr.Load(); derr != nil {
			return *derr
		}
		return fmt.Errorf("first call: %w", err)
	}
	fmt.Printf("grpc: first call (connect included) over %s: %v\n", exutil.Network(tcp), time.Since(t0).Round(time.Microsecond))
	rtts := make([]time.Duration, count)
	var total time.Duration
	for i := range count {
		t0 := time.Now()
		if err := cc.Invoke(ctx, "/rnet.examples.Echo/Unary", &req, &resp); err != nil {
			return fmt.Errorf("unary call %d: %w", i, err)
		}
		rtts[i] = time.Since(t0)
		total += rtts[i]
		if !bytes.Equal(resp, req) {
			return fmt.Errorf("unary call %d: the reply differs from the request", i)
		}
	}
	p50, p99 := exutil.Percentiles(rtts)
	mean := total / time.Duration(count)
	fmt.Printf("unary:    %d calls of %d B: p50 %s µs, p99 %s µs, mean %s µs\n", count, size, exutil.Micros(p50), exutil.Micros(p99), exutil.Micros(mean))

	// Server streaming.
	n := streamBytes / chunk
	down, err := download(ctx, cc, n)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	fmt.Printf("download: %d messages of %d B in %v: %s MB/s\n", n, chunk, down.Round(time.Microsecond), exutil.MBps(int64(n*chunk), down))

	// Client streaming.
	up, err := upload(ctx, cc, n)
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	fmt.Printf("upload:   %d messages of %d B in %v: %s MB/s\n", n, chunk, up.Round(time.Microsecond), exutil.MBps(int64(n*chunk), up))

	tlsState := "off"
	if creds.Info().SecurityProtocol == "tls" {
		tlsState = "on"
	}
	fmt.Printf("RESULT grpc net=%s tls=%s size=%d count=%d p50_us=%s p99_us=%s mean_us=%s download_MBps=%s upload_MBps=%s\n",
		exutil.Network(tcp), tlsState, size, count, exutil.Micros(p50), exutil.Micros(p99), exutil.Micros(mean),
		exutil.MBps(int64(n*chunk), down), exutil.MBps(int64(n*chunk), up))
	return cc.Close()
}

func download(ctx context.Context, cc *grpc.ClientConn, n int) (time.Duration, error) {
	t0 := time.Now()
	stream, err := cc.NewStream(ctx, &echoService.Streams[0], "/rnet.examples.Echo/Download")
	if err != nil {
		return 0, err
	}
	req := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(n)), chunk)
	if err := stream.SendMsg(&req); err != nil {
		return 0, err
	}
	if err := stream.CloseSend(); err != nil {
		return 0, err
	}
	want := pattern(chunk)
	var msg []byte
	for i := 0; ; i++ {
		err := stream.RecvMsg(&msg)
		if err == io.EOF {
			if i != n {
				return 0, fmt.Errorf("got %d messages, want %d", i, n)
			}
			return time.Since(t0), nil
		}
		if err != nil {
			return 0, err
		}
		if !bytes.Equal(msg, want) {
			return 0, fmt.Errorf("message %d differs", i)
		}
	}
}

func upload(ctx context.Context, cc *grpc.ClientConn, n int) (time.Duration, error) {
	t0 := time.Now()
	stream, err := cc.NewStream(ctx, &echoService.Streams[1], "/rnet.examples.Echo/Upload")
	if err != nil {
		return 0, err
	}
	msg := pattern(chunk)
	for range n {
		if err := stream.SendMsg(&msg); err != nil {
			return 0, err
		}
	}
	if err := stream.CloseSend(); err != nil {
		return 0, err
	}
	var resp []byte
	if err := stream.RecvMsg(&resp); err != nil {
		return 0, err
	}
	if len(resp) != 8 || binary.BigEndian.Uint64(resp) != uint64(n*chunk) {
		return 0, fmt.Errorf("the server counted %x, want %d bytes", resp, n*chunk)
	}
	return time.Since(t0), nil
}
