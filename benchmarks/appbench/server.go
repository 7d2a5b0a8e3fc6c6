package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"

	"google.golang.org/grpc"
)

// serve answers gRPC on addr and HTTP on the next port until a client calls
// Stop; ready is told both addresses once they listen.
func serve(t *transport, addr string, perf string, data http.Handler, ready func(grpcAddr, httpAddr string)) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p == 0 {
		return fmt.Errorf("-s %s: want a port other than 0 (HTTP takes the next one)", addr)
	}
	gln, err := t.Listen(addr)
	if err != nil {
		return fmt.Errorf("gRPC listener: %w", err)
	}
	hln, err := t.Listen(net.JoinHostPort(host, strconv.Itoa(p+1)))
	if err != nil {
		gln.Close()
		return fmt.Errorf("HTTP listener: %w", err)
	}
	ready(gln.Addr().String(), hln.Addr().String())
	return serveOn(t, gln, hln, perf, data)
}

// serveOn serves gRPC on gln and HTTP on hln until a client calls Stop.
// With perf, the path of perf, it counts every system call of each workload.
func serveOn(t *transport, gln, hln net.Listener, perf string, data http.Handler) error {
	s := &server{conns: &t.conns, syscalls: newSyscallCounter(perf), stop: make(chan struct{})}
	gs := grpc.NewServer()
	gs.RegisterService(&benchService, s)
	hs := httpServer(data)
	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(gln) }()
	go func() { errc <- hs.Serve(hln) }()
	var err error
	select {
	case <-s.stop:
	case err = <-errc:
	}
	hs.Close()
	gs.GracefulStop() // lets the Stop call answer
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, io.EOF) {
		err = nil
	}
	return err
}
