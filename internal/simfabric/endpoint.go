package simfabric

import "github.com/rnet-dev/rnet/internal/wr"

// An endpoint's own CQ, the completions it generates (into its own CQ or a
// shared one), and its error state.

// Peer returns the other end of the connection.
func (e *Endpoint) Peer() *Endpoint { return e.peer }

// QPNum returns the endpoint's queue pair number, unique in its fabric: the
// QPNum of its completions.
func (e *Endpoint) QPNum() uint32 { return e.qpNum }

// Notify returns a channel that receives a value (capacity 1, never
// closed) when completions may be available. A waiter should drain PollCQ
// after each wake-up.
func (e *Endpoint) Notify() <-chan struct{} { return e.notify }

func (e *Endpoint) signal() {
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

// PollCQ copies up to len(out) visible completions into out, oldest first,
// and returns how many. Payloads delivered so far land in memory first. An
// endpoint on a shared CQ has none of its own: poll the CQ instead.
func (e *Endpoint) PollCQ(out []wr.Completion) int {
	if e.cqLen.Load() == 0 {
		return 0 // what has landed unannounced can wait for the next poll
	}
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.dead {
		return 0
	}
	e.land()
	n := 0
	for n < len(out) {
		var q *queue[cqEntry]
		s, r := &e.sendCQ, &e.recvCQ
		sOK := s.len() > 0 && s.front().visibleAt <= f.now
		rOK := r.len() > 0 && r.front().visibleAt <= f.now
		switch {
		case sOK && rOK:
			q = s
			if r.front().seq < s.front().seq {
				q = r
			}
		case sOK:
			q = s
		case rOK:
			q = r
		default:
			return n
		}
		ent := q.pop()
		e.cqLen.Add(-1)
		if q == s {
			e.sendsInFlight--
		}
		out[n] = ent.wc
		n++
		e.stats.Completions++
		if ent.wc.Status != wr.WCSuccess {
			e.stats.ErrorCompletion++
		}
	}
	return n
}

// Stats returns a snapshot of the endpoint's counters.
func (e *Endpoint) Stats() EndpointStats {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	return e.stats
}

// QueuedRecvs returns the number of posted receives not yet consumed.
func (e *Endpoint) QueuedRecvs() int {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	return e.recvQ.len()
}

func sendWCOpcode(op wr.Opcode) wr.WCOpcode {
	if op == wr.OpSend {
		return wr.WCSend
	}
	return wr.WCRDMAWrite
}

// completeSend queues a send completion, keeping posting order; a send
// completion becomes visible after a random delay.
func (e *Endpoint) completeSend(id uint64, opc wr.WCOpcode, status wr.WCStatus, flush bool) {
	f := e.f
	if !flush && e.inject != wr.WCSuccess {
		status, e.inject = e.inject, wr.WCSuccess
		defer e.enterError()
	}
	vis := max(e.lastSendVis, f.now+f.delay(f.opts.MaxCompletionDelay))
	e.lastSendVis = vis
	if status != wr.WCSuccess {
		f.stats.Errors++
	}
	wc := wr.Completion{ID: id, Status: status, Opcode: opc, QPNum: e.qpNum}
	if e.shared != nil && vis <= f.now {
		// Nothing earlier waits in sendCQ: lastSendVis is past now
		// while anything does.
		e.shared.push(e, wc, true)
		return
	}
	e.cqSeq++
	e.sendCQ.push(cqEntry{wc: wc, visibleAt: vis, seq: e.cqSeq})
	if e.shared != nil {
		return // Step shows it in the shared CQ when it becomes visible
	}
	e.cqLen.Add(1)
	if vis <= f.now {
		e.signal()
	}
}

func (e *Endpoint) addRecvCompletion(wc wr.Completion, flush bool) {
	f := e.f
	if !flush && e.inject != wr.WCSuccess {
		wc.Status, e.inject = e.inject, wr.WCSuccess
		defer e.enterError()
	}
	wc.QPNum = e.qpNum
	if wc.Status != wr.WCSuccess {
		f.stats.Errors++
	}
	if e.shared != nil {
		e.shared.push(e, wc, false)
		return
	}
	e.cqSeq++
	e.recvCQ.push(cqEntry{wc: wc, visibleAt: f.now, seq: e.cqSeq})
	e.cqLen.Add(1)
	e.signal()
}

// becameVisible reports whether a completion is visible at now.
func (e *Endpoint) becameVisible(now int64) bool {
	if e.dead {
		return false
	}
	return (e.sendCQ.len() > 0 && e.sendCQ.front().visibleAt <= now) || e.recvCQ.len() > 0
}

// enterError moves e's queue pair to the error state and flushes its
// outstanding work requests.
func (e *Endpoint) enterError() {
	if e.qpErr || e.dead {
		return
	}
	e.qpErr = true
	for e.recvQ.len() > 0 {
		w := e.recvQ.pop()
		e.addRecvCompletion(wr.Completion{ID: w.ID, Status: wr.WCWRFlushErr, Opcode: wr.WCRecv}, true)
	}
	for e.wire.len() > 0 {
		op := e.wire.pop()
		e.peer.landing.push(landing{start: op.payStart, end: op.payEnd})
		e.completeSend(op.id, sendWCOpcode(op.op), wr.WCWRFlushErr, true)
	}
	e.signal()
}
