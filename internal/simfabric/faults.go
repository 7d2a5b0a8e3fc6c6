package simfabric

import "github.com/rnet-dev/rnet/internal/wr"

// Faults a test injects: a peer that vanishes, a failed completion, a
// disconnect, a queue pair that fails, a device removed, a wire cut.

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
// that has not reached its peer is lost; its oldest send still outstanding
// completes with status, visible before anything else e has not completed
// (the completions of sends already done become visible with it, in
// order); everything else it has outstanding, and anything posted later,
// completes with WCWRFlushErr. With no send outstanding, status shows
// nowhere and every receive is flushed: a device raises no error on a
// receive because its path failed (it says so by an async event, which
// the fabric does not model, and by the flushes), and a queue pair that
// only receives learns of a cut wire only when it sends. Unlike Disconnect,
// the peer hears nothing: its queue pair stays up, and what it sends to e
// fails with WCRetryExcErr, as across a cut wire. A queue pair already in
// error, or killed, is left as it is. status must be an error status.
func (e *Endpoint) Fail(status wr.WCStatus) { e.fail(status, false) }

// FailLosingCompletions is Fail on a device that is removed (rdma link
// delete): first the completions e has generated and its owner has not
// polled are lost, in its own CQ or a shared one, and with them the word
// of what landed or left; then e fails as Fail says. It returns how many
// completions were lost.
func (e *Endpoint) FailLosingCompletions(status wr.WCStatus) (lost int) {
	return e.fail(status, true)
}

func (e *Endpoint) fail(status wr.WCStatus, loseUnpolled bool) (lost int) {
	if status == wr.WCSuccess {
		panic("simfabric: Fail with WCSuccess")
	}
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.qpErr || e.dead {
		return 0
	}
	if loseUnpolled {
		lost = e.dropUnpolled()
	}
	if e.wire.len() > 0 {
		op := e.wire.pop()
		e.peer.landing.push(landing{start: op.payStart, end: op.payEnd})
		e.completeSend(op.id, sendWCOpcode(op.op), status, true)
		e.showSendsNow()
	}
	e.enterError()
	if f.opts.Auto {
		f.pump(e.peer) // what the peer has waiting for e now fails
	}
	return lost
}

// showSendsNow makes every send completion e has generated visible now,
// in order, so that the one Fail just added comes before the flushes.
func (e *Endpoint) showSendsNow() {
	f := e.f
	for i := range e.sendCQ.n {
		ent := &e.sendCQ.buf[(e.sendCQ.head+i)%len(e.sendCQ.buf)]
		ent.visibleAt = min(ent.visibleAt, f.now)
	}
	e.lastSendVis = min(e.lastSendVis, f.now)
	switch {
	case e.shared != nil:
		e.showVisibleSends(f.now)
	case e.sendCQ.len() > 0:
		e.signal()
	}
}

// dropUnpolled loses e's completions not yet polled and returns how many.
func (e *Endpoint) dropUnpolled() int {
	lost := e.recvCQ.len() + e.sendCQ.len()
	e.sendsInFlight -= e.sendCQ.len()
	e.sendCQ, e.recvCQ = queue[cqEntry]{}, queue[cqEntry]{}
	e.cqLen.Store(0)
	if q := e.shared; q != nil {
		var kept queue[sharedEntry]
		for q.queue.len() > 0 {
			ent := q.queue.pop()
			if ent.ep != e {
				kept.push(ent)
				continue
			}
			lost++
			q.length.Add(-1)
			if ent.send {
				e.sendsInFlight--
			}
		}
		q.queue = kept
	}
	return lost
}

// Cut cuts the wire between e and its peer, as a pulled cable does: both
// queue pairs stay up and hear nothing at once. What either has on the
// wire, and whatever either sends later, never arrives: the send fails
// with WCRetryExcErr once its retries run out, and that queue pair goes to
// the error state, flushing the rest. A queue pair that only receives sees
// nothing until it sends.
func (e *Endpoint) Cut() {
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	e.cut = true
	e.peer.cut = true
	if f.opts.Auto {
		f.pump(e)
		f.pump(e.peer)
	}
}
