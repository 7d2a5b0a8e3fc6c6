package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rnet-dev/rnet/internal/bytesize"
	"github.com/rnet-dev/rnet/rnet"
)

// scaleServer holds every connection of one scale client, echoes each
// one's message, counts what busy ones stream, and measures itself when
// the client asks.
type scaleServer struct {
	stderr io.Writer
	tcp    bool
	// firstRequestWait bounds the wait for the client's first request,
	// and requestWait a request's bytes once its first has come.
	firstRequestWait, requestWait time.Duration

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	serving sync.WaitGroup // one per connection's serve
	closing atomic.Bool    // the run is over: errors of closed connections are expected
	logMu   sync.Mutex     // one line at a time on stderr

	echoed          atomic.Int64
	handshakeErrors atomic.Int64
	connErrors      atomic.Int64
	bufs            sync.Pool // busy connections' read buffers, so idle ones hold none
}

// How many of the listener's refusals and connections' failures the server
// prints; past it, it counts them.
const scaleErrorsShown = 10

func newScaleServer(stderr io.Writer, tcp bool) *scaleServer {
	s := &scaleServer{stderr: stderr, tcp: tcp, firstRequestWait: controlTimeout, requestWait: controlTimeout, conns: make(map[net.Conn]struct{})}
	s.bufs.New = func() any { return make([]byte, busyWriteSize) }
	return s
}

func runScaleServer(o scaleOpts, stdout, stderr io.Writer) error {
	s := newScaleServer(stderr, o.tcp)
	if !o.tcp {
		// The RDMA libraries keep a context per device open for the life
		// of the process once first used: open them before the baseline.
		if err := warmUpRDMA(o.addr, o.device); err != nil {
			return err
		}
	}
	base, err := takeHoldings(o.tcp)
	if err != nil {
		return err
	}
	ln, err := s.listen(o.addr, o.device)
	if err != nil {
		return err
	}
	defer ln.Close()
	if o.device != "" {
		// The control connection goes to the address the device gave.
		if o.ctlAddr, err = controlAddr(ln.Addr().String()); err != nil {
			return err
		}
	}
	ctlLn, err := net.Listen("tcp", o.ctlAddr)
	if err != nil {
		return fmt.Errorf("control listener on %s (TCP, the RDMA port + 1): %w", o.ctlAddr, err)
	}
	fmt.Fprintf(stdout, "rnet scale: listening on %s (%s), control on %s (tcp)\n", ln.Addr(), netName(o.tcp), ctlLn.Addr())
	if err := s.run(ln, ctlLn); err != nil {
		return err
	}
	return checkReleased(base, o.tcp, stdout)
}

// run serves one client: connections on ln, its requests on ctlLn's first
// connection; it closes both listeners and every connection when done.
func (s *scaleServer) run(ln, ctlLn net.Listener) error {
	defer ln.Close()
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		s.acceptLoop(ln)
	}()
	ctl, err := ctlLn.Accept()
	ctlLn.Close()
	if err != nil {
		return fmt.Errorf("control listener: %w", err)
	}
	err = s.control(ctl)
	ctl.Close()
	ln.Close()
	<-acceptDone
	s.closeAll()
	return err
}

func (s *scaleServer) listen(addr, device string) (net.Listener, error) {
	if s.tcp {
		if device != "" {
			var err error
			if addr, err = tcpListenOnDevice(device, addr); err != nil {
				return nil, err
			}
		}
		return net.Listen("tcp", addr)
	}
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		if err := checkRDMAAddr(ap.Addr(), "listen address"); err != nil {
			return nil, err
		}
	}
	lc := rnet.ListenConfig{
		Config: rdmaConfig(),
		Device: device,
		// Room for every dial a client keeps in flight, and then some.
		Backlog:              1024,
		MaxPendingHandshakes: 64,
		HandshakeError: func(remote net.Addr, err error) {
			if s.handshakeErrors.Add(1) <= scaleErrorsShown {
				s.logf("rnet scale: listener refused %s: %v%s\n", remote, err, limitHint(err))
			}
		},
	}
	ln, err := lc.Listen(context.Background(), "rdma", addr)
	if err != nil {
		return nil, explain(err, addr)
	}
	return ln, nil
}

func (s *scaleServer) acceptLoop(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.logf("rnet scale: accept, with %d connections held: %v%s\n", s.held(), err, limitHint(err))
			}
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.serving.Add(1)
		go s.serve(c)
	}
}

func (s *scaleServer) held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *scaleServer) logf(format string, a ...any) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.stderr, format, a...)
}

func (s *scaleServer) connFailed(c net.Conn, step string, err error) {
	if s.closing.Load() {
		return
	}
	if s.connErrors.Add(1) <= scaleErrorsShown {
		s.logf("rnet scale: connection from %s, %s: %v%s\n", c.RemoteAddr(), step, err, limitHint(err))
	}
}

// serve echoes the connection's message, then waits (parked, holding no
// buffer) for busy headers: each announces a byte count, which it reads
// and acknowledges with the count it received.
func (s *scaleServer) serve(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
		s.serving.Done()
	}()
	var msg [scaleMsgLen]byte
	if _, err := io.ReadFull(c, msg[:]); err != nil {
		s.connFailed(c, "echo read", err)
		return
	}
	if err := checkEchoMessage(msg[:]); err != nil {
		s.connFailed(c, "echo check", err)
		return
	}
	if _, err := c.Write(msg[:]); err != nil {
		s.connFailed(c, "echo write", err)
		return
	}
	s.echoed.Add(1)
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			if err != io.EOF {
				s.connFailed(c, "busy header", err)
			}
			return
		}
		n := binary.BigEndian.Uint64(hdr[:])
		if n == 0 || n > maxBusyBytes {
			s.connFailed(c, "busy header", fmt.Errorf("announces %d bytes, want 1..%d", n, int64(maxBusyBytes)))
			return
		}
		buf := s.bufs.Get().([]byte)
		got, err := io.CopyBuffer(io.Discard, io.LimitReader(c, int64(n)), buf)
		s.bufs.Put(buf)
		if err == nil && uint64(got) < n {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			s.connFailed(c, fmt.Sprintf("busy read after %d of %d bytes", got, n), err)
			return
		}
		var ack [8]byte
		binary.BigEndian.PutUint64(ack[:], uint64(got))
		if _, err := c.Write(ack[:]); err != nil {
			s.connFailed(c, "busy ack", err)
			return
		}
	}
}

// control answers the client's requests until it says done or goes away.
func (s *scaleServer) control(ctl net.Conn) error {
	enc, dec := json.NewEncoder(ctl), newControlReader(ctl, s.firstRequestWait, s.requestWait)
	var before memInfo
	var sameMachine bool
	for first := true; ; first = false {
		var req scaleRequest
		if err := dec.read(&req, first); err != nil {
			if err == io.EOF {
				return errors.New("the client closed the control connection before it was done")
			}
			return fmt.Errorf("control connection: %w", err)
		}
		var rep scaleReply
		switch req.Op {
		case "begin":
			var err error
			if before, err = readMeminfo(); err != nil {
				rep.Error = err.Error()
			}
			sameMachine = req.BootID != "" && req.BootID == bootID()
		case "measure":
			f, err := s.measure(req.Conns, before, sameMachine)
			if err != nil {
				rep.Error = err.Error()
			} else {
				rep.Figures = &f
				s.logf("rnet scale: holding %d connections: %s pinned in %d MRs, %d CQs, %d fds, %d threads\n",
					f.Conns, bytesize.Format(uint64(f.Status.PinnedBytes)), f.MRs, f.CQs, f.FDs, f.Status.Threads)
			}
		case "done":
			return enc.Encode(rep)
		default:
			rep.Error = fmt.Sprintf("unknown request %q", req.Op)
		}
		if err := enc.Encode(rep); err != nil {
			return fmt.Errorf("control connection: %w", err)
		}
	}
}

// measure waits for the server's side of the client's connections to have
// echoed (the client has its echo a moment before the server counts it),
// then reads what the process and the machine hold.
func (s *scaleServer) measure(conns int, before memInfo, sameMachine bool) (serverFigures, error) {
	deadline := time.Now().Add(30 * time.Second)
	for s.echoed.Load() < int64(conns) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // between readings of a real condition
	}
	f := serverFigures{Conns: s.held(), MemBefore: before, HandshakeErrors: int(s.handshakeErrors.Load())}
	f.Ends = f.Conns
	if sameMachine {
		f.Ends = 2 * f.Conns
	}
	var err error
	if f.MemAfter, err = readMeminfo(); err != nil {
		return f, err
	}
	if f.Status, err = readStatus(); err != nil {
		return f, err
	}
	if f.FDs, err = openFDs(); err != nil {
		return f, fmt.Errorf("counting open fds: %w", err)
	}
	if s.tcp {
		f.RDMAError = "a TCP run holds no RDMA objects"
		return f, nil
	}
	var errMR, errCQ error
	f.MRs, f.MRBytes, errMR = rdmaResources("mr")
	f.CQs, _, errCQ = rdmaResources("cq")
	if err := errors.Join(errMR, errCQ); err != nil {
		f.RDMAError = err.Error()
		s.logf("rnet scale: %v\n", err)
	}
	return f, nil
}

// closeAll closes every connection and waits for their serve goroutines.
func (s *scaleServer) closeAll() {
	s.closing.Store(true)
	defer s.serving.Wait()
	s.mu.Lock()
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	closeAll(conns, 64)
}
