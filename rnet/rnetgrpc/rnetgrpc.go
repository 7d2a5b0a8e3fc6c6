// Package rnetgrpc runs gRPC over RDMA with rnet: one dial option on the client,
// an rnet listener on the server, and nothing else in the application changes.
//
// It is its own package, in its own module (github.com/rnet-dev/rnet/rnet/rnetgrpc),
// so that programs using rnet without gRPC neither link nor require grpc-go.
// Tests can serve and dial gRPC over package rnettest's in-memory connections:
// serve a Listener of an rnettest.Fabric and dial with FabricDialOption, on
// any machine; the Fabric's faults (Cut, VanishPeer, HoldCredits, Delay)
// then drive the client's error paths.
//
// # Client
//
//	cc, err := grpc.NewClient("10.0.0.2:50051",
//		rnetgrpc.DialOption(nil), // nil: rnet's default Config
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//
// Both of grpc.NewClient's usual target forms work. With the default "dns"
// scheme ("host:port" or "dns:///host:port") gRPC resolves the host and the
// dialer is handed each resolved "ip:port"; with "passthrough:///host:port"
// the dialer gets the literal "host:port" and rnet resolves it. Either way the
// host must name the IP address of an RDMA-capable interface (a RoCE or iWARP
// NIC, or IPoIB).
//
// TLS works as it does over TCP: pass grpc.WithTransportCredentials with TLS
// credentials instead of insecure ones, since rnet carries a plain byte stream.
//
// # Server
//
// A *rnet.Listener is a net.Listener, so the server side needs no helper:
//
//	ln, err := rnet.Listen("rdma", "10.0.0.2:50051")
//	if err != nil { ... }
//	s := grpc.NewServer()
//	pb.RegisterGreeterServer(s, &server{})
//	err = s.Serve(ln) // returns when s.Stop or s.GracefulStop is called
//
// To size accepted connections, listen with rnet.ListenConfig{Config: cfg}.
// To serve clients with RDMA and clients without it on one port, serve an
// rnet.DualListener (ListenConfig.ListenDual); clients dialling with
// WithTCPFallback reach it either way.
package rnetgrpc

import (
	"context"
	"net"
	"time"

	"github.com/rnet-dev/rnet/rnet"
	"google.golang.org/grpc"
)

// Option adjusts the rnet.Dialer behind DialOption.
type Option func(*rnet.Dialer)

// WithLocalAddr makes connections leave from the local address a, which picks
// the RDMA device (see rnet.Dialer.LocalAddr). A port in a is ignored.
func WithLocalAddr(a net.Addr) Option {
	return func(d *rnet.Dialer) { d.LocalAddr = a }
}

// WithDevice makes connections leave from the RDMA device named name, such
// as "mlx5_0" (see rnet.Dialer.Device).
func WithDevice(name string) Option {
	return func(d *rnet.Dialer) { d.Device = name }
}

// WithTimeout bounds each connection attempt (see rnet.Dialer.Timeout). gRPC
// also bounds attempts by its own connect timeout (20 s by default).
func WithTimeout(t time.Duration) Option {
	return func(d *rnet.Dialer) { d.Timeout = t }
}

// WithTCPFallback makes a connection that cannot be made over RDMA (no RDMA
// device or route, refused, too slow) go over TCP to the same host and port
// (see rnet.Dialer.TCPFallback). A server on an rnet.DualListener takes both.
func WithTCPFallback() Option {
	return func(d *rnet.Dialer) { d.TCPFallback = true }
}

// DialOption returns a grpc.DialOption that makes every connection of a
// grpc.ClientConn an rnet connection, sized by cfg (nil for the defaults).
// It is grpc.WithContextDialer underneath, so it replaces any other context
// dialer given to the same ClientConn.
func DialOption(cfg *rnet.Config, opts ...Option) grpc.DialOption {
	return grpc.WithContextDialer(Dialer(cfg, opts...))
}

// Dialer returns the dial function that DialOption installs, for code that
// composes its own grpc.WithContextDialer (to log or count connections, say).
func Dialer(cfg *rnet.Config, opts ...Option) func(ctx context.Context, addr string) (net.Conn, error) {
	d := rnet.Dialer{Config: cfg}
	for _, o := range opts {
		o(&d)
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialConn(ctx, "rdma", addr)
	}
}

// Fabric is an in-memory network to dial instead of RDMA, such as package
// rnettest's *Fabric.
type Fabric interface {
	DialConn(ctx context.Context, network, address string) (net.Conn, error)
}

// FabricDialOption returns a grpc.DialOption that dials every connection of a
// grpc.ClientConn in f, for tests: a server serving one of f's Listeners
// answers it, with rnet's connections and errors, on a machine without an
// RDMA device. Like DialOption it is grpc.WithContextDialer underneath.
func FabricDialOption(f Fabric) grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return f.DialConn(ctx, "rdma", addr)
	})
}
