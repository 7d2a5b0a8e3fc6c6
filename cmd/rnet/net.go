package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/rnet-dev/rnet/rnet"
)

// The hello a client sends first: magic, mode, the stream's number in its
// test (from 1), the number of streams in the test, the size of each write,
// and the test's id, which the streams of one -P test share. Clients from
// before -P send 0 for the number, the streams and the id: one stream. A
// reverse (-R) hello is followed by helloExtLen bytes: how many bytes the
// server is to send, or for how long.
const (
	helloLen        = 16
	helloExtLen     = 16
	magic           = "RNT1"
	modePerf        = 1
	modePing        = 2
	modePerfReverse = 3
	maxSize         = 64 << 20
	maxStreams      = 128
	// The longest, and the most bytes, a reverse stream may ask the server
	// to send: a bound on what one hello can make the server do.
	maxReverseDuration = 24 * time.Hour
	maxReverseBytes    = 1 << 40
	dialLimit          = 15 * time.Second
)

type hello struct {
	mode    byte
	stream  byte   // this stream's number in its test, from 1; 0 from clients before -P
	streams uint16 // in this stream's test; 0 from clients before -P
	size    uint32
	test    uint32 // the id the streams of one test share
	// Reverse tests only: the server sends bytes, or for duration.
	bytes    int64
	duration time.Duration
}

func (h hello) encode() []byte {
	b := make([]byte, helloLen, helloLen+helloExtLen)
	copy(b, magic)
	b[4] = h.mode
	b[5] = h.stream
	binary.BigEndian.PutUint16(b[6:], h.streams)
	binary.BigEndian.PutUint32(b[8:], h.size)
	binary.BigEndian.PutUint32(b[12:], h.test)
	if h.mode == modePerfReverse {
		b = binary.BigEndian.AppendUint64(b, uint64(h.bytes))
		b = binary.BigEndian.AppendUint64(b, uint64(h.duration))
	}
	return b
}

func decodeHello(b []byte) (hello, error) {
	if len(b) != helloLen || string(b[:4]) != magic {
		return hello{}, errors.New("not an rnet perf/ping client")
	}
	h := hello{mode: b[4], stream: b[5], streams: binary.BigEndian.Uint16(b[6:]), size: binary.BigEndian.Uint32(b[8:]), test: binary.BigEndian.Uint32(b[12:])}
	knownMode := h.mode == modePerf || h.mode == modePing || h.mode == modePerfReverse
	if !knownMode || h.size == 0 || h.size > maxSize || h.streams > maxStreams || uint16(h.stream) > max(h.streams, 1) {
		return hello{}, fmt.Errorf("bad hello: mode %d size %d streams %d", h.mode, h.size, h.streams)
	}
	h.streams, h.stream = max(h.streams, 1), max(h.stream, 1)
	return h, nil
}

// decodeHelloExt reads a reverse hello's extension into h.
func decodeHelloExt(h *hello, b []byte) error {
	h.bytes = int64(binary.BigEndian.Uint64(b))
	h.duration = time.Duration(binary.BigEndian.Uint64(b[8:]))
	if (h.bytes > 0) == (h.duration > 0) || h.bytes < 0 || h.bytes > maxReverseBytes || h.duration < 0 || h.duration > maxReverseDuration {
		return fmt.Errorf("bad reverse hello: %d bytes, duration %v (want one of them, up to %d bytes or %v)", h.bytes, h.duration, int64(maxReverseBytes), maxReverseDuration)
	}
	return nil
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

// listen listens on addr over TCP, RDMA, or (fallback) both on one port,
// and says what it listens over: with -fallback on a machine where RDMA
// cannot listen, TCP alone and why. A device (-d) picks the address.
func listen(tcp, fallback bool, addr, device string, cfg *rnet.Config) (ln net.Listener, over string, err error) {
	if tcp {
		if device != "" {
			if addr, err = tcpListenOnDevice(device, addr); err != nil {
				return nil, "", err
			}
		}
		ln, err := net.Listen("tcp", addr)
		return ln, "tcp", err
	}
	if ap, err := netip.ParseAddrPort(addr); err == nil && !fallback {
		if err := checkRDMAAddr(ap.Addr(), "listen address"); err != nil {
			return nil, "", err
		}
	}
	lc := &rnet.ListenConfig{Config: cfg, Device: device}
	if fallback {
		dl, err := lc.ListenDual(context.Background(), "rdma", addr)
		if err != nil {
			return nil, "", explain(err, addr)
		}
		if err := dl.RDMAError(); err != nil {
			return dl, "tcp alone; rdma cannot listen: " + explain(err, addr).Error(), nil
		}
		return dl, "rdma and tcp", nil
	}
	rl, err := lc.Listen(context.Background(), "rdma", addr)
	if err != nil {
		return nil, "", explain(err, addr)
	}
	return rl, "rdma", nil
}

// dial connects to addr over TCP, RDMA, or RDMA falling back to TCP, from
// the address from or the device (-d) picks, if either.
func dial(tcp, fallback bool, addr, from, device string, cfg *rnet.Config) (net.Conn, error) {
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
		if device != "" {
			var err error
			if fromIP, addr, err = tcpDialFromDevice(ctx, device, addr); err != nil {
				return nil, err
			}
		}
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
	d := rnet.Dialer{Config: cfg, TCPFallback: fallback, Device: device}
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

// readAck reads the peer's 8-byte count of bytes received.
func readAck(c net.Conn) (uint64, error) {
	var b [8]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(b[:]), nil
}

// writeAck sends the 8-byte count of bytes received.
func writeAck(c net.Conn, n int64) error {
	_, err := c.Write(binary.BigEndian.AppendUint64(nil, uint64(n)))
	return err
}
