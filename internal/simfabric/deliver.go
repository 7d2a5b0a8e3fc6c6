package simfabric

import "github.com/rnet-dev/rnet/internal/wr"

// Step advances time by one step, delivers what is due and reports whether
// anything happened (a delivery, or a completion becoming visible).
func (f *Fabric) Step() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now++
	progress := false
	for _, e := range f.eps {
		if f.pump(e) {
			progress = true
		}
	}
	for _, e := range f.eps {
		if e.shared != nil {
			if !e.dead && e.showVisibleSends(f.now) {
				progress = true
			}
			continue
		}
		if e.becameVisible(f.now) {
			progress = true
			e.signal()
		}
	}
	return progress
}

// pump delivers src's due work requests in order and reports whether any
// was delivered. It stops at the first request that is not due yet or that
// waits for a receive (RNRRetry).
func (f *Fabric) pump(src *Endpoint) bool {
	progress := false
	for src.wire.len() > 0 && !src.dead && !src.qpErr {
		if src.wire.front().deliverAt > f.now {
			break
		}
		// Pop first: a failure flushes the rest of the wire, not this one.
		op := src.wire.pop()
		if !f.deliver(src, &op, nil) {
			src.wire.pushFront(op)
			break
		}
		progress = true
	}
	return progress
}

// deliver carries out one request at the peer. It returns false, having
// changed nothing but a counter, if the request has to wait for a receive.
// A payload given here is copied into the peer's memory at once; without
// one the bytes wait in the peer's inbound FIFO until it polls.
func (f *Fabric) deliver(src *Endpoint, op *wireOp, payload *[2][]byte) bool {
	dst := src.peer
	status := wr.WCSuccess
	var target []byte // where the payload lands, nil if nowhere
	needRecv := op.op == wr.OpWriteImm || op.op == wr.OpSend

	switch {
	case dst.dead || dst.qpErr || src.cut:
		// Nobody answers: the requester retries, then gives up.
		status = wr.WCRetryExcErr
	case op.op != wr.OpSend && op.length > 0:
		b, ok := dst.remote(op.remoteAddr, op.length, op.rkey)
		if !ok {
			status = wr.WCRemAccessErr
			defer dst.enterError()
		}
		target = b
	}

	var recvWC wr.Completion
	haveRecv := false
	if status == wr.WCSuccess && needRecv {
		if dst.recvQ.len() == 0 {
			if f.opts.RNRRetry {
				f.stats.RNRStalls++
				return false
			}
			f.stats.RNR++
			src.stats.RNR++
			status = wr.WCRNRRetryExcErr
			target = nil
		} else {
			rwr := dst.recvQ.pop()
			haveRecv = true
			recvWC = wr.Completion{ID: rwr.ID, Opcode: wr.WCRecvRDMAWithImm, Imm: op.imm, ByteLen: op.length}
			if op.op == wr.OpSend {
				recvWC.Opcode, recvWC.Imm = wr.WCRecv, 0
				var room uint32
				if rwr.NumSGE == 1 {
					room = rwr.SGE.Length
				}
				if op.length > room {
					recvWC.Status = wr.WCLocLenErr
					status = wr.WCRemInvReqErr
					defer dst.enterError()
				} else if op.length > 0 {
					target, _ = dst.local(wr.SGE{Addr: rwr.SGE.Addr, Length: op.length, LKey: rwr.SGE.LKey}, false)
				}
			}
		}
	}

	if status == wr.WCSuccess {
		f.stats.Delivered++
		f.stats.BytesDelivered += uint64(op.length)
	} else {
		target = nil
	}
	switch {
	case payload == nil:
		dst.landing.push(landing{dst: target, start: op.payStart, end: op.payEnd})
	case target != nil:
		n := copy(target, payload[0])
		copy(target[n:], payload[1])
	}
	if haveRecv {
		dst.addRecvCompletion(recvWC, false)
	}
	if op.signaled || status != wr.WCSuccess {
		src.completeSend(op.id, sendWCOpcode(op.op), status, false)
	} else {
		src.sendsInFlight--
	}
	if status != wr.WCSuccess {
		src.enterError()
	}
	return true
}
