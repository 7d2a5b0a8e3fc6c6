package rnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rnet-dev/rnet/internal/lockcount"
	"github.com/rnet-dev/rnet/internal/stream"
)

// DualListener listens over RDMA and over TCP on one address and port, so
// that clients with RDMA and clients without it reach the same server.
// Accept returns a *Conn for an RDMA client and a *TCPConn (Reason
// FallbackPeerTCP) for a TCP one. On a machine without RDMA it listens
// over TCP alone, and RDMAError says why.
//
// RDMA over RoCE or InfiniBand has a port space of its own, apart from
// TCP's. iWARP runs over TCP and takes the TCP port itself, so on an
// address served by an iWARP device the TCP side cannot be had: ListenDual
// fails with an error that says so.
type DualListener struct {
	rdma    *Listener // nil when RDMA could not listen
	rdmaErr error
	tcp     *net.TCPListener

	conns    chan net.Conn
	done     chan struct{} // closed by shut
	shutOnce sync.Once
	wg       sync.WaitGroup // the accepting goroutines

	failMu  lockcount.Mutex
	failErr error // the first listener to fail for good; Accept returns it

	acceptedRDMA, acceptedTCP atomic.Uint64
	acceptDL                  *stream.Deadline // SetDeadline's
	// peeking counts the TCP connections being looked at for a resume
	// request, and the resumes over TCP under way (see screenTCP).
	peeking atomic.Int32
}

// ListenDual listens on address over RDMA (network "rdma", "rdma4" or
// "rdma6") and over TCP on the same port. Port 0 picks a port free on both.
func (lc *ListenConfig) ListenDual(ctx context.Context, network, address string) (*DualListener, error) {
	tcpNet, ok := tcpNetworks[network]
	if !ok {
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	laddr, err := resolveAddr(ctx, network, address)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	// A chosen port may be taken on the TCP side: try a few.
	tries := 1
	if laddr.Port() == 0 {
		tries = 8
	}
	for try := 1; ; try++ {
		dl, err := lc.listenDualOnce(ctx, network, tcpNet, laddr)
		if err == nil || try == tries || !errors.Is(err, syscall.EADDRINUSE) {
			return dl, exportError(err)
		}
	}
}

func (lc *ListenConfig) listenDualOnce(ctx context.Context, network, tcpNet string, laddr netip.AddrPort) (*DualListener, error) {
	dl := &DualListener{conns: make(chan net.Conn), done: make(chan struct{}), acceptDL: stream.NewDeadline(func() {})}
	rl, err := lc.Listen(ctx, network, laddr.String())
	switch {
	case err == nil:
		dl.rdma = rl
		laddr = rl.Addr().(*Addr).AddrPort
		// From the first reply on, which may go before the TCP side
		// listens: a dialer resumes over TCP only as a last resort.
		dl.takeResumesOverTCP()
	case errors.Is(err, ErrNoDevice), errors.Is(err, ErrNotSupported):
		dl.rdmaErr = err // TCP alone
	default:
		return nil, err
	}
	var tcpLC net.ListenConfig
	tl, err := tcpLC.Listen(ctx, tcpNet, laddr.String())
	if err != nil {
		if dl.rdma != nil {
			dl.rdma.Close()
			if errors.Is(err, syscall.EADDRINUSE) && onIWARP(laddr.Addr()) {
				err = &net.OpError{Op: "listen", Net: tcpNet, Addr: netAddr(laddr), Err: errIWARPPortTaken}
			}
		}
		return nil, err
	}
	dl.tcp = tl.(*net.TCPListener)
	dl.wg.Add(1)
	go dl.acceptTCP()
	if dl.rdma != nil {
		dl.wg.Add(1)
		go dl.acceptRDMA()
	}
	return dl, nil
}

var errIWARPPortTaken = errors.New("an iWARP device serves this address and takes the TCP port for its own connections; listen for TCP on another port, or over RDMA alone")

// acceptRDMA hands the RDMA listener's connections to Accept.
func (dl *DualListener) acceptRDMA() {
	defer dl.wg.Done()
	for {
		c, err := dl.rdma.AcceptRDMA()
		if err != nil {
			dl.fail(err)
			return
		}
		if !dl.hand(c) {
			return
		}
	}
}

// acceptTCP hands the TCP listener's connections to Accept, as TCPConns.
func (dl *DualListener) acceptTCP() {
	defer dl.wg.Done()
	var retry eventRetry
	for {
		c, err := dl.tcp.AcceptTCP()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				retry.wait(dl.done) // as net/http's server does, wait out a shortage
				continue
			}
			dl.fail(err)
			return
		}
		retry.reset()
		if dl.screenTCP(c) {
			continue // it may resume a connection: Accept gets it if not
		}
		dialCounts[FallbackPeerTCP].Add(1)
		if !dl.hand(newTCPConn(c, FallbackPeerTCP, nil)) {
			return
		}
	}
}

// hand passes c to Accept, or closes it if the listener closes first.
func (dl *DualListener) hand(c net.Conn) bool {
	select {
	case dl.conns <- c:
		return true
	case <-dl.done:
		c.Close()
		return false
	}
}

// fail records err, unless the listener is closing, and shuts the
// listener: one side failing for good ends it, since a server would
// otherwise go on half-deaf without knowing. Accept then returns err.
func (dl *DualListener) fail(err error) {
	select {
	case <-dl.done:
		return
	default:
	}
	dl.failMu.Lock()
	if dl.failErr == nil {
		dl.failErr = err
	}
	dl.failMu.Unlock()
	dl.shut()
}

// shut closes both listeners, once, without waiting for the accepting
// goroutines (one of them may be the caller).
func (dl *DualListener) shut() error {
	var err error
	dl.shutOnce.Do(func() {
		close(dl.done)
		dl.acceptDL.Stop()
		err = dl.tcp.Close()
		if dl.rdma != nil {
			err = errors.Join(err, dl.rdma.Close())
		}
	})
	return err
}

// Accept waits for and returns the next connection, over RDMA (a *Conn)
// or TCP (a *TCPConn).
func (dl *DualListener) Accept() (net.Conn, error) {
	select {
	case c := <-dl.conns:
		if _, ok := c.(*Conn); ok {
			dl.acceptedRDMA.Add(1)
		} else {
			dl.acceptedTCP.Add(1)
		}
		return c, nil
	case <-dl.acceptDL.Wait():
		return nil, &net.OpError{Op: "accept", Net: "rdma", Addr: dl.Addr(), Err: os.ErrDeadlineExceeded}
	case <-dl.done:
	}
	dl.failMu.Lock()
	err := dl.failErr
	dl.failMu.Unlock()
	if err == nil {
		err = net.ErrClosed
	}
	return nil, exportError(&net.OpError{Op: "accept", Net: "rdma", Addr: dl.Addr(), Err: unwrapOp(err)})
}

func unwrapOp(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Err
	}
	return err
}

// Close stops listening on both transports. A blocked Accept returns
// net.ErrClosed; connections accepted but not yet returned are closed.
func (dl *DualListener) Close() error {
	err := dl.shut()
	dl.wg.Wait()
	return err
}

// SetDeadline sets the deadline for Accept, as Listener's does.
func (dl *DualListener) SetDeadline(t time.Time) error {
	select {
	case <-dl.done:
		return &net.OpError{Op: "set", Net: "rdma", Addr: dl.Addr(), Err: net.ErrClosed}
	default:
	}
	dl.acceptDL.Set(t)
	return nil
}

// Addr returns the listener's address: the RDMA listener's *Addr, or the
// TCP listener's address when there is no RDMA.
func (dl *DualListener) Addr() net.Addr {
	if dl.rdma != nil {
		return dl.rdma.Addr()
	}
	return dl.tcp.Addr()
}

// Accepted returns how many connections Accept has returned over RDMA and
// over TCP.
func (dl *DualListener) Accepted() (rdma, tcp uint64) {
	return dl.acceptedRDMA.Load(), dl.acceptedTCP.Load()
}

// RDMAError says why the listener has no RDMA side (no device, say), or is
// nil when it has one.
func (dl *DualListener) RDMAError() error { return dl.rdmaErr }
