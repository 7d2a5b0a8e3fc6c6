// Package simqp is the connection driver's queue pair over the simulated
// fabric (internal/simfabric), and the pairs of established engines it
// runs: what tests, and package rnettest, run connections over without a
// device. Package rnet does not import it; rnettest does, for its users' tests.
package simqp

import (
	"errors"
	"net"
	"runtime"
	"sync"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/wr"
)

// QP is a stream.QueuePair over the simulated fabric, so the whole
// connection driver (engine, completion waits, pusher, deadlines, close) is
// exercised on machines without RDMA: by its own tests and rnet's, and by
// package rnettest for its users'.
type QP struct {
	ep           *simfabric.Endpoint
	laddr, raddr net.Addr
	peer         *QP

	stop       chan struct{}
	kicked     chan struct{}
	stopOnce   sync.Once
	peerGone   chan struct{} // closed when the peer disconnects, like CM's DISCONNECTED
	goneOnce   sync.Once
	discOnce   sync.Once
	eventsDone chan struct{}

	// readiedPeer says a step since the last spinning step's yield may
	// have readied the peer's goroutine (see step); guarded by the conn.
	readiedPeer bool

	// Waiting, when a test sets it before the connection starts, is
	// signalled each time a caller starts waiting on the completion
	// channel: a test can then reply only once the Conn has really parked.
	Waiting chan struct{}
}

// Step posts and polls as a device's Step does; there is nothing to arm,
// since the endpoint's Notify channel always reports new completions, and
// no event to take, since Notify's token is gone once wait received it.
// Empty lists are not posted, so that a poll that finds nothing takes no
// lock the peer needs.
//
// Posting readies the peer's goroutine directly, unlike a device, whose
// peer the kernel wakes: it sits in this P's runnext, where an idle P steals
// it only after a delay. So a spinning Step (tries > 1) yields when it moved
// anything, or when an earlier Step did, or the spinner would starve the
// peer it just fed.
func (q *QP) Step(flags wr.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	if len(recvs) > 0 {
		if err := q.ep.PostRecv(recvs); err != nil {
			return 0, err
		}
	}
	if len(sends) > 0 {
		if err := q.ep.PostSend(sends); err != nil {
			return 0, err
		}
	}
	n := q.ep.PollCQ(out)
	for t := tries; n == 0 && t > 1; t-- {
		n = q.ep.PollCQ(out)
	}
	moved := n > 0 || len(recvs) > 0 || len(sends) > 0
	if tries > 1 && (moved || q.readiedPeer) {
		q.readiedPeer = false
		runtime.Gosched()
	} else if tries == 1 && moved {
		q.readiedPeer = true // a later spin yields for it first
	}
	return n, nil
}

func (q *QP) Wait() (parked bool, err error) {
	select {
	case <-q.ep.Notify():
		return false, nil
	case <-q.kicked:
		return false, nil
	case <-q.stop:
		return false, net.ErrClosed
	default:
	}
	if q.Waiting != nil {
		select {
		case q.Waiting <- struct{}{}:
		default:
		}
	}
	select {
	case <-q.ep.Notify():
		return true, nil
	case <-q.kicked:
		return true, nil
	case <-q.stop:
		return true, net.ErrClosed
	}
}

func (q *QP) Collected() bool { return false }
func (q *QP) CollectAll()     {}

// NeedSends does nothing: every completion of the endpoint's CQ wakes
// Wait.
func (q *QP) NeedSends(bool) {}

func (q *QP) Kick() {
	select {
	case q.kicked <- struct{}{}:
	default:
	}
}

func (q *QP) Start(h interface {
	TransportDisconnected()
	TransportFailed(err error)
}) {
	go func() {
		defer close(q.eventsDone)
		select {
		case <-q.peerGone:
			h.TransportDisconnected()
		case <-q.stop:
		}
	}()
}

func (q *QP) Disconnect() {
	q.discOnce.Do(func() {
		q.ep.DisconnectLocal()
		q.peer.goneOnce.Do(func() { close(q.peer.peerGone) })
	})
}

func (q *QP) Shutdown() {
	q.stopOnce.Do(func() { close(q.stop) })
	<-q.eventsDone
}

func (q *QP) Destroy() error { return nil }

// AddRegion registers a ring's new region with the simulated device: the
// peer can write it only if it is a receive ring.
func (q *QP) AddRegion(kind ring.RegionKind, size int) (ring.Region, error) {
	return q.ep.Register(make([]byte, size), kind == ring.RegionRecv), nil
}

// RemoveRegion deregisters it: the peer's writes into it then fail with a
// remote access error, as on a device.
func (q *QP) RemoveRegion(r ring.Region) error {
	if !q.ep.Deregister(r) {
		return errors.New("simqp: region not registered")
	}
	return nil
}

func (q *QP) LocalAddr() net.Addr  { return q.laddr }
func (q *QP) RemoteAddr() net.Addr { return q.raddr }

// New returns the queue pair of endpoint ep, at address local, connected to
// remote; Connect pairs it with the peer's.
func New(ep *simfabric.Endpoint, local, remote net.Addr) *QP {
	return &QP{
		ep:         ep,
		laddr:      local,
		raddr:      remote,
		stop:       make(chan struct{}),
		kicked:     make(chan struct{}, 1),
		peerGone:   make(chan struct{}),
		eventsDone: make(chan struct{}),
	}
}

// Connect makes a and b each other's peer: one's Disconnect reaches the
// other as the transport's disconnect.
func Connect(a, b *QP) { a.peer, b.peer = b, a }

// Endpoint returns the simulated endpoint under q.
func (q *QP) Endpoint() *simfabric.Endpoint { return q.ep }
