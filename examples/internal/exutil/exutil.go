// Package exutil holds what the example programs share: choosing between rnet
// and TCP, and explaining a missing RDMA device.
package exutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sort"
	"time"

	"github.com/rnet-dev/rnet/rnet"
)

// Network is "rdma" or, with -tcp, "tcp".
func Network(tcp bool) string {
	if tcp {
		return "tcp"
	}
	return "rdma"
}

// Listen listens on addr over rnet, or over TCP when tcp is set.
func Listen(tcp bool, addr string) (net.Listener, error) {
	if tcp {
		return net.Listen("tcp", addr)
	}
	ln, err := rnet.Listen("rdma", addr)
	if err != nil {
		return nil, err
	}
	return ln, nil
}

// Dialer returns a dial function over rnet or TCP, leaving from the IP
// address from when it is not empty.
func Dialer(tcp bool, from string) (func(ctx context.Context, addr string) (net.Conn, error), error) {
	var local netip.Addr
	if from != "" {
		var err error
		if local, err = netip.ParseAddr(from); err != nil {
			return nil, fmt.Errorf("-from: %v", err)
		}
	}
	if tcp {
		d := &net.Dialer{Timeout: 30 * time.Second}
		if local.IsValid() {
			d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(local, 0))
		}
		return func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }, nil
	}
	d := &rnet.Dialer{Timeout: 30 * time.Second}
	if local.IsValid() {
		d.LocalAddr = &rnet.Addr{AddrPort: netip.AddrPortFrom(local, 0)}
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, "rdma", addr)
		if err != nil {
			return nil, err
		}
		return c, nil
	}, nil
}

// Fatal prints err and exits 1. When the failure is a missing RDMA device or
// platform support, it says so and how to proceed.
func Fatal(prog string, tcp bool, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", prog, err)
	if !tcp && noRDMA(err) {
		fmt.Fprintf(os.Stderr, "%s: this machine has no usable RDMA device. Run `make demo`, which uses a Soft-RoCE guest, or pass -tcp to run over TCP.\n", prog)
	}
	os.Exit(1)
}

// Percentiles returns the median and the 99th percentile of d, sorting it.
func Percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2], d[len(d)*99/100]
}

// Micros formats d in microseconds.
func Micros(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond)) }

// MBps is n bytes over d in megabytes (10^6) per second.
func MBps(n int64, d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	return fmt.Sprintf("%.1f", float64(n)/d.Seconds()/1e6)
}

// noRDMA reports an error that means this machine cannot do RDMA at all.
func noRDMA(err error) bool {
	return errors.Is(err, rnet.ErrNoDevice) || errors.Is(err, rnet.ErrNotSupported)
}
