package simfabric

import "github.com/rnet-dev/rnet/internal/wr"

// Faults a test injects: a peer that vanishes, a failed completion, a
// disconnect.

// Kill makes e vanish without a word, like a crashed host: its pending
// work is dropped, it completes nothing more, and whatever its peer sends
// it fails with WCRetryExcErr.
func (f *Fabric) Kill(e *Endpoint) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.dead {
		return
	}
	e.dead = true
	for e.wire.len() > 0 {
		op := e.wire.pop()
		e.peer.landing.push(landing{start: op.payStart, end: op.payEnd})
	}
	e.sendCQ = queue[cqEntry]{}
	e.recvCQ = queue[cqEntry]{}
	e.cqLen.Store(0)
	e.recvQ = queue[wr.Recv]{}
	e.signal()
	if f.opts.Auto {
		f.pump(e.peer)
	}
}

// Vanish is Kill of e on its fabric.
func (e *Endpoint) Vanish() { e.f.Kill(e) }

// InjectError makes the next completion generated on e (send or receive)
// fail with status; the queue pair then goes to the error state.
func (e *Endpoint) InjectError(status wr.WCStatus) {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	e.inject = status
}

// DisconnectLocal takes this queue pair to the error state, as
// rdma_disconnect does on a device: what is outstanding here is flushed,
// while the peer's queue pair stays up until it disconnects too (it hears
// of the disconnect from the connection manager, not from its CQ), and
// what it sends meanwhile fails with WCRetryExcErr.
func (e *Endpoint) DisconnectLocal() {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	e.enterError()
}

// Disconnect takes both queue pairs to the error state at once: everything
// outstanding on either side is flushed.
func (e *Endpoint) Disconnect() {
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	e.enterError()
	if e.peer != nil && !e.peer.dead {
		e.peer.enterError()
	}
}
