package simfabric

import "github.com/rnet-dev/rnet/internal/wr"

// Posting work requests, as ibv_post_send and ibv_post_recv do.

// PostSend posts send work requests, as ibv_post_send: it validates them
// in order and stops at the first bad one, returning its error; those
// before it are posted. Payloads are read at post time.
func (e *Endpoint) PostSend(wrs []wr.Send) error {
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.dead {
		return ErrDead
	}
	for i := range wrs {
		w := &wrs[i]
		if e.sendsInFlight >= e.caps.SendDepth {
			return ErrQueueFull
		}
		if w.NumSGE < 0 || w.NumSGE > 2 ||
			(w.Op != wr.OpWrite && w.Op != wr.OpWriteImm && w.Op != wr.OpSend) {
			return ErrInvalidWR
		}
		var total uint32
		for j := 0; j < w.NumSGE; j++ {
			if _, ok := e.local(w.SGE[j], w.Inline); !ok {
				return ErrInvalidWR
			}
			total += w.SGE[j].Length
		}
		if w.Inline && int(total) > e.caps.MaxInline {
			return ErrInvalidWR
		}
		e.stats.SendsPosted++
		e.sendsInFlight++
		if e.qpErr {
			e.completeSend(w.ID, sendWCOpcode(w.Op), wr.WCWRFlushErr, true)
			continue
		}
		op := wireOp{
			id:         w.ID,
			op:         w.Op,
			imm:        w.Imm,
			signaled:   w.Signaled,
			remoteAddr: w.RemoteAddr,
			rkey:       w.RKey,
			length:     total,
		}
		var payload [2][]byte
		for j := 0; j < w.NumSGE; j++ {
			payload[j], _ = e.local(w.SGE[j], w.Inline)
		}
		// Only with nothing ahead of it, on the wire or waiting to land,
		// may a request land now without overtaking another.
		if f.opts.DirectLanding && e.wire.len() == 0 && e.peer.landing.len() == 0 && f.deliver(e, &op, &payload) {
			continue
		}
		op.payStart = e.peer.inbound.head
		for j := 0; j < w.NumSGE; j++ {
			e.peer.inbound.push(payload[j])
		}
		op.payEnd = e.peer.inbound.head
		op.deliverAt = max(e.lastDeliverAt, f.now+f.delay(f.opts.MaxWireDelay))
		e.lastDeliverAt = op.deliverAt
		e.wire.push(op)
	}
	if f.opts.Auto {
		f.pump(e)
	}
	return nil
}

// PostRecv posts receive work requests, as ibv_post_recv.
func (e *Endpoint) PostRecv(wrs []wr.Recv) error {
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.dead {
		return ErrDead
	}
	for i := range wrs {
		w := wrs[i]
		if e.recvQ.len() >= e.caps.RecvDepth {
			return ErrQueueFull
		}
		if w.NumSGE < 0 || w.NumSGE > 1 {
			return ErrInvalidWR
		}
		if w.NumSGE == 1 {
			if _, ok := e.local(w.SGE, false); !ok {
				return ErrInvalidWR
			}
		}
		e.stats.RecvsPosted++
		if e.qpErr {
			e.addRecvCompletion(wr.Completion{ID: w.ID, Status: wr.WCWRFlushErr, Opcode: wr.WCRecv}, true)
			continue
		}
		e.recvQ.push(w)
	}
	if f.opts.Auto && e.peer != nil {
		f.pump(e.peer) // a message may have been waiting for a receive
	}
	return nil
}
