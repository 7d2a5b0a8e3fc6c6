package simfabric

import "github.com/rnet-dev/rnet/internal/wr"

// Faults a test injects: a peer that vanishes, a failed completion, a
// disconnect, a queue pair that fails.

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

// Fail takes e's queue pair to the error state now, as a device error does
// (a cut wire whose retries ran out, a port gone, a reset): what e posted
// that has not reached its peer is lost; its oldest outstanding send
// completes with status, or, with no send outstanding, its oldest receive
// does; everything else it has outstanding, and anything posted later,
// completes with WCWRFlushErr. Unlike Disconnect, the peer hears nothing:
// its queue pair stays up, and what it sends to e fails with WCRetryExcErr,
// as across a cut wire. A queue pair already in error, or killed, is left
// as it is. status must be an error status.
func (e *Endpoint) Fail(status wr.WCStatus) {
	if status == wr.WCSuccess {
		panic("simfabric: Fail with WCSuccess")
	}
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	if e.qpErr || e.dead {
		return
	}
	switch {
	case e.wire.len() > 0:
		op := e.wire.pop()
		e.peer.landing.push(landing{start: op.payStart, end: op.payEnd})
		e.completeSend(op.id, sendWCOpcode(op.op), status, true)
	case e.recvQ.len() > 0:
		w := e.recvQ.pop()
		e.addRecvCompletion(wr.Completion{ID: w.ID, Status: status, Opcode: wr.WCRecv}, true)
	}
	e.enterError()
}
