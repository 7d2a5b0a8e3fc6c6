package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rnet-dev/rnet/rnet"
)

// DefaultPort is rstream's port.
const DefaultPort = 7471

// The hello a client sends first: magic, mode, size, count.
const (
	helloLen  = 16
	magic     = "RNT1"
	modePerf  = 1
	modePing  = 2
	maxSize   = 64 << 20
	dialLimit = 15 * time.Second
)

type hello struct {
	mode  byte
	size  uint32
	count uint32
}

func (h hello) encode() []byte {
	b := make([]byte, helloLen)
	copy(b, magic)
	b[4] = h.mode
	binary.BigEndian.PutUint32(b[8:], h.size)
	binary.BigEndian.PutUint32(b[12:], h.count)
	return b
}

func decodeHello(b []byte) (hello, error) {
	if len(b) != helloLen || string(b[:4]) != magic {
		return hello{}, errors.New("not an rnet perf/ping client")
	}
	h := hello{mode: b[4], size: binary.BigEndian.Uint32(b[8:]), count: binary.BigEndian.Uint32(b[12:])}
	if (h.mode != modePerf && h.mode != modePing) || h.size == 0 || h.size > maxSize {
		return hello{}, fmt.Errorf("bad hello: mode %d size %d", h.mode, h.size)
	}
	return h, nil
}

// hostPort completes "host", "host:port", ":port" or "" with DefaultPort.
func hostPort(s string) (string, error) {
	if s == "" {
		return ":" + strconv.Itoa(DefaultPort), nil
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return net.JoinHostPort(s, strconv.Itoa(DefaultPort)), nil
	}
	if h, ok := strings.CutPrefix(s, "["); ok && strings.HasSuffix(h, "]") {
		// A bracketed IPv6 address without a port.
		return net.JoinHostPort(strings.TrimSuffix(h, "]"), strconv.Itoa(DefaultPort)), nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		// A bare host name.
		return net.JoinHostPort(s, strconv.Itoa(DefaultPort)), nil
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		// A service name, as rnet.Dial and net.Dial take.
		n, lerr := net.LookupPort("tcp", port)
		if lerr != nil {
			return "", fmt.Errorf("bad port in %q: not a number or a known service name", s)
		}
		port = strconv.Itoa(n)
	}
	return net.JoinHostPort(host, port), nil
}

func netName(tcp bool) string {
	if tcp {
		return "tcp"
	}
	return "rdma"
}

// transportOf names the transport c runs on, and why it is TCP when it
// fell back from RDMA ("" otherwise).
func transportOf(c net.Conn, tcp bool) (transport, fallback string) {
	if tc, ok := c.(*rnet.TCPConn); ok {
		return "tcp", tc.Reason.String()
	}
	return netName(tcp), ""
}

// withFallback is a transport's name with its fallback reason, if any.
func withFallback(transport, fallback string) string {
	if fallback == "" {
		return transport
	}
	return transport + " (fallback: " + fallback + ")"
}

// listen listens on addr over TCP, RDMA, or (fallback) both on one port.
func listen(tcp, fallback bool, addr string) (net.Listener, error) {
	if tcp {
		return net.Listen("tcp", addr)
	}
	if ap, err := netip.ParseAddrPort(addr); err == nil && !fallback {
		if err := checkRDMAAddr(ap.Addr(), "listen address"); err != nil {
			return nil, err
		}
	}
	lc := &rnet.ListenConfig{Config: rdmaConfig()}
	if fallback {
		ln, err := lc.ListenDual(context.Background(), "rdma", addr)
		if err != nil {
			return nil, explain(err, addr)
		}
		if err := ln.RDMAError(); err != nil {
			fmt.Fprintf(os.Stderr, "rnet: listening over TCP alone: %v\n", explain(err, addr))
		}
		return ln, nil
	}
	ln, err := lc.Listen(context.Background(), "rdma", addr)
	if err != nil {
		return nil, explain(err, addr)
	}
	return ln, nil
}

// dial connects to addr over TCP, RDMA, or RDMA falling back to TCP.
func dial(tcp, fallback bool, addr, from string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialLimit)
	defer cancel()
	var fromIP netip.Addr
	if from != "" {
		var err error
		if fromIP, err = netip.ParseAddr(from); err != nil {
			return nil, fmt.Errorf("-from %q is not an IP address", from)
		}
	}
	if tcp {
		d := net.Dialer{}
		if fromIP.IsValid() {
			d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(fromIP, 0)) // keeps a zone
		}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, explain(err, addr)
		}
		return c, nil
	}
	d := rnet.Dialer{Config: rdmaConfig(), TCPFallback: fallback}
	if fromIP.IsValid() {
		if err := checkRDMAAddr(fromIP, "-from address"); err != nil && !fallback {
			return nil, err
		}
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(fromIP, 0))
	}
	c, err := d.DialConn(ctx, "rdma", addr)
	if err != nil {
		return nil, explain(err, addr)
	}
	return c, nil
}

// explain turns the errors a user can fix into a sentence saying how.
func explain(err error, addr string) error {
	switch {
	case errors.Is(err, rnet.ErrNoDevice):
		return fmt.Errorf("no RDMA device on this machine (rnet devices lists none): %w", err)
	case errors.Is(err, rnet.ErrNotSupported):
		return fmt.Errorf("this build has no RDMA support (needs Linux, cgo, libibverbs and librdmacm): %w", err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%s refused the connection: nothing listens there (start rnet perf -s on the peer), or its listener's backlog is full: %w", addr, err)
	case errors.Is(err, syscall.ENODEV), errors.Is(err, syscall.EADDRNOTAVAIL), errors.Is(err, syscall.ENETUNREACH):
		return fmt.Errorf("%s is not reachable over RDMA: the address is not on an RDMA interface, or no RDMA route leads there (see rnet devices): %w", addr, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s did not answer within %v (no route, or a host without RDMA): %w", addr, dialLimit, err)
	}
	return err
}

// readAck reads the server's 8-byte count of bytes received.
func readAck(c net.Conn) (uint64, error) {
	var b [8]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(b[:]), nil
}

// rdmaConfig is the connection Config of both ends, from the environment:
//
//	RNET_BUSY_POLL    how long a blocked Read or Write spins on the completion
//	                  queue before parking (a Go duration, e.g. 200us); on
//	                  machines where waking a parked goroutine is slow (an
//	                  emulated guest) spinning longer trades CPU for latency.
//	RNET_BUSY_POLL_LIMIT  how far the spin may grow on a connection whose
//	                  waits are short (Config.BusyPollLimit; -1 turns the
//	                  adaptive spin off).
//	RNET_ACK_TIMEOUT  how long the transport waits for an acknowledgement
//	                  before it resends (Config.AckTimeout, a Go duration).
//	RNET_BUFFER_SIZE  bytes in each of the send and receive rings (rstream
//	                  uses 1 MiB; rnet's default is rsocket's 128 KiB).
func rdmaConfig() *rnet.Config {
	var c rnet.Config
	set := false
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{"RNET_BUSY_POLL", &c.BusyPoll}, {"RNET_BUSY_POLL_LIMIT", &c.BusyPollLimit}, {"RNET_ACK_TIMEOUT", &c.AckTimeout}} {
		v := os.Getenv(d.name)
		if v == "" {
			continue
		}
		if t, err := time.ParseDuration(v); err != nil {
			fmt.Fprintf(os.Stderr, "rnet: ignoring %s=%q: %v\n", d.name, v, err)
		} else {
			*d.dst, set = t, true
		}
	}
	if v := os.Getenv("RNET_BUFFER_SIZE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "rnet: ignoring RNET_BUFFER_SIZE=%q: want a number of bytes\n", v)
		} else {
			c.SendBufferSize, c.RecvBufferSize, set = n, n, true
		}
	}
	if !set {
		return nil
	}
	return &c
}
