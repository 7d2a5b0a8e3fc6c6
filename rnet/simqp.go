package rnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/rnetsim"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// Package rnettest builds Conns and Listeners over the simulated fabric for
// programs that test against rnet without a device; these hooks are its only
// way in, so that package rnet exports nothing for it.
func init() {
	rnetsim.Register(rnetsim.Hooks[Config, Conn, Listener]{Pair: validSimPair, Listen: simListen})
}

// validSimPair is simPair for a Config from outside, which Dial would check.
func validSimPair(cfg *Config, client, server netip.AddrPort) (*Conn, *Conn, error) {
	if err := cfg.validate(); err != nil {
		return nil, nil, err
	}
	return simPair(cfg, client, server)
}

// simPair returns two Conns connected over a fresh simulated fabric, the
// first at address client, the second at server, both configured by cfg.
func simPair(cfg *Config, client, server netip.AddrPort) (*Conn, *Conn, error) {
	return simPairWrapped(cfg, client, server, nil)
}

// simPairWrapped is simPair with the client's queue pair wrapped by wrap,
// if not nil: rnet's tests hold its completions back with it.
func simPairWrapped(cfg *Config, client, server netip.AddrPort, wrap func(*simQP) queuePair) (*Conn, *Conn, error) {
	set := cfg.settings()
	layout := set.ring.Layout()
	caps := simfabric.Caps{SendDepth: layout.SendDepth, RecvDepth: layout.RecvDepth, MaxInline: 256}
	f := simfabric.New(1, simfabric.Options{Auto: true, DirectLanding: true})
	a, b := f.Pair(caps, caps)
	newEngine := func(ep *simfabric.Endpoint) (*ring.Engine, error) {
		eng, err := ring.New(set.ring,
			ep.Register(make([]byte, layout.SendRegion), false),
			ep.Register(make([]byte, layout.RecvRegion), true),
			ep.Register(make([]byte, layout.TargetRegion), true))
		if err != nil {
			return nil, err
		}
		return eng, ep.PostRecv(eng.PostRecvs(nil))
	}
	ea, err := newEngine(a)
	if err != nil {
		return nil, nil, fmt.Errorf("simulated fabric: client engine: %w", err)
	}
	eb, err := newEngine(b)
	if err != nil {
		return nil, nil, fmt.Errorf("simulated fabric: server engine: %w", err)
	}
	pa, pb := ea.LocalConnData(), eb.LocalConnData()
	if err := ea.Establish(pb[:]); err != nil {
		return nil, nil, fmt.Errorf("simulated fabric: client handshake: %w", err)
	}
	if err := eb.Establish(pa[:]); err != nil {
		return nil, nil, fmt.Errorf("simulated fabric: server handshake: %w", err)
	}
	qa := newSimQPAt(a, client, server)
	qb := newSimQPAt(b, server, client)
	qa.peer, qb.peer = qb, qa
	var qpa queuePair = qa
	if wrap != nil {
		qpa = wrap(qa)
	}
	return newConn(qpa, ea, set), newConn(qb, eb, set), nil
}

// simListen returns a Listener at addr with room for backlog established
// connections, and the function that queues one for its Accept: false when
// the backlog is full or the Listener closed, and the caller then closes the
// connection. The Listener's Close calls stop before closing what is queued.
func simListen(addr netip.AddrPort, backlog int, stop func()) (*Listener, func(*Conn) bool) {
	l := &listener{
		addr:     netAddr(addr),
		conns:    make(chan *Conn, backlog),
		done:     make(chan struct{}),
		failed:   make(chan struct{}),
		acceptDL: newDeadline(func() {}),
		stop:     stop,
	}
	l.requestsDone.L = &l.requestsMu
	offer := func(c *Conn) bool {
		select {
		case <-l.done:
			return false
		default:
		}
		select {
		case l.conns <- c:
			return true
		default:
			return false
		}
	}
	return newListener(l), offer
}

// simQP runs a Conn over the simulated fabric, so the whole Conn (engine,
// completion waits, pusher, deadlines, close) is exercised on machines
// without RDMA: by rnet's own tests, and by package rnettest for its users'.
type simQP struct {
	ep           *simfabric.Endpoint
	laddr, raddr net.Addr
	peer         *simQP

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

	// waiting, when a test sets it, is signalled each time a caller
	// starts waiting on the completion channel: a test can then reply
	// only once the Conn has really parked.
	waiting chan struct{}
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
func (q *simQP) Step(flags verbs.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
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

func (q *simQP) Wait() (parked bool, err error) {
	select {
	case <-q.ep.Notify():
		return false, nil
	case <-q.kicked:
		return false, nil
	case <-q.stop:
		return false, net.ErrClosed
	default:
	}
	if q.waiting != nil {
		select {
		case q.waiting <- struct{}{}:
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

func (q *simQP) Collected() bool { return false }
func (q *simQP) CollectAll()     {}

func (q *simQP) Kick() {
	select {
	case q.kicked <- struct{}{}:
	default:
	}
}

func (q *simQP) Start(h eventHandler) {
	go func() {
		defer close(q.eventsDone)
		select {
		case <-q.peerGone:
			h.TransportDisconnected()
		case <-q.stop:
		}
	}()
}

func (q *simQP) Disconnect() {
	q.discOnce.Do(func() {
		q.ep.DisconnectLocal()
		q.peer.goneOnce.Do(func() { close(q.peer.peerGone) })
	})
}

func (q *simQP) Shutdown() {
	q.stopOnce.Do(func() { close(q.stop) })
	<-q.eventsDone
}

func (q *simQP) Destroy() error { return nil }

// AddRegion registers a ring's new region with the simulated device: the
// peer can write it only if it is a receive ring.
func (q *simQP) AddRegion(kind ring.RegionKind, size int) (ring.Region, error) {
	return q.ep.Register(make([]byte, size), kind == ring.RegionRecv), nil
}

// RemoveRegion deregisters it: the peer's writes into it then fail with a
// remote access error, as on a device.
func (q *simQP) RemoveRegion(r ring.Region) error {
	if !q.ep.Deregister(r) {
		return errors.New("simQP: region not registered")
	}
	return nil
}

func (q *simQP) LocalAddr() net.Addr  { return q.laddr }
func (q *simQP) RemoteAddr() net.Addr { return q.raddr }

func newSimQP(ep *simfabric.Endpoint, local, remote string) *simQP {
	return newSimQPAt(ep, netip.MustParseAddrPort(local), netip.MustParseAddrPort(remote))
}

func newSimQPAt(ep *simfabric.Endpoint, local, remote netip.AddrPort) *simQP {
	return &simQP{
		ep:         ep,
		laddr:      netAddr(local),
		raddr:      netAddr(remote),
		stop:       make(chan struct{}),
		kicked:     make(chan struct{}, 1),
		peerGone:   make(chan struct{}),
		eventsDone: make(chan struct{}),
	}
}
