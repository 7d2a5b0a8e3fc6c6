package tcpqp

import (
	"fmt"
	"runtime"

	"github.com/rnet-dev/rnet/internal/wr"
)

// Posting work requests, and polling: the landing of the peer's frames and
// the completions they and the writer leave.

// Step posts recvs, then sends, then hands over up to len(out)
// completions, landing the peer's frames as it goes. flags ask for nothing
// here: Wait is woken by every completion without arming. With tries > 1 a
// step that found nothing yields and polls again, up to tries polls.
func (q *QP) Step(_ wr.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return 0, errDestroyed
	}
	if err := q.postRecvsLocked(recvs); err != nil {
		return 0, err
	}
	if err := q.postSendsLocked(sends); err != nil {
		return 0, err
	}
	n := q.pollLocked(out)
	for t := tries; n == 0 && t > 1 && len(out) > 0; t-- {
		// Let the reader and writer queue what they have.
		q.mu.Unlock()
		runtime.Gosched()
		q.mu.Lock()
		if q.destroyed {
			return 0, errDestroyed
		}
		n = q.pollLocked(out)
	}
	return n, nil
}

// postRecvsLocked queues receives, as ibv_post_recv. In the error state
// they still queue: frames that arrived before it may consume them, and
// pollLocked flushes the rest after those have landed.
func (q *QP) postRecvsLocked(recvs []wr.Recv) error {
	for i := range recvs {
		w := &recvs[i]
		if w.NumSGE < 0 || w.NumSGE > 1 {
			return errInvalidWR
		}
		if q.recvQ.len() >= q.recvDepth {
			return errQueueFull
		}
		q.recvQ.push(*w)
	}
	return nil
}

// postSendsLocked gathers each send's payload now, as an inline post
// does, and queues its frame for the writer. A send whose SGE names no
// registered memory completes with WCLocProtErr and moves the queue pair to
// the error state, as a device would.
func (q *QP) postSendsLocked(sends []wr.Send) error {
	posted := false
	defer func() {
		if posted {
			signal(q.wake)
		}
	}()
	for i := range sends {
		w := &sends[i]
		if q.sendsOut >= q.sendDepth {
			return errQueueFull
		}
		if w.NumSGE < 0 || w.NumSGE > len(w.SGE) || w.Op > wr.OpSendImm {
			return errInvalidWR
		}
		q.sendsOut++
		if q.qpErr {
			q.late.push(wr.Completion{ID: w.ID, Status: wr.WCWRFlushErr, Opcode: sendWCOpcode(w.Op)})
			signal(q.notify)
			continue
		}
		start := len(q.out)
		q.out = append(q.out, make([]byte, headerSize)...)
		ok := true
		for j := 0; j < w.NumSGE && ok; j++ {
			var b []byte
			if b, ok = q.mem.local(w.SGE[j], w.Inline); ok {
				q.out = append(q.out, b...)
			}
		}
		if !ok {
			q.out = q.out[:start]
			q.enterErrorLocked()
			q.late.push(wr.Completion{ID: w.ID, Status: wr.WCLocProtErr, Opcode: sendWCOpcode(w.Op)})
			continue
		}
		rkey, addr := w.RKey, w.RemoteAddr
		if w.Op == wr.OpSend || w.Op == wr.OpSendImm {
			rkey, addr = 0, 0
		}
		imm := w.Imm
		if w.Op == wr.OpWrite || w.Op == wr.OpSend {
			imm = 0
		}
		putHeader(q.out[start:], w.Op, imm, uint32(len(q.out)-start-headerSize), rkey, addr)
		q.pending = append(q.pending, sendRec{id: w.ID, op: w.Op, signaled: w.Signaled})
		posted = true
	}
	return nil
}

// pollLocked hands over up to len(out) completions, oldest first: those
// queued, then those of the frames it lands, then, in the error state and
// once every frame that arrived before it has landed, the flushes.
func (q *QP) pollLocked(out []wr.Completion) int {
	n, landed := 0, 0
	for n < len(out) {
		switch {
		case q.cq.len() > 0:
			wc := q.cq.pop()
			if !wc.Opcode.IsRecv() {
				q.sendsOut--
			}
			out[n] = wc
			n++
		case q.inbound.len() > 0 && landed == maxLandedPerPoll:
			// A flood of frames that complete nothing (RDMA WRITEs)
			// would keep this loop, under the connection's lock, busy
			// for the whole inbound queue: the rest waits for the next
			// step, which Wait does not hold back.
			signal(q.notify)
			signal(q.room)
			return n
		case q.inbound.len() > 0:
			q.landLocked(q.inbound.pop())
			landed++
		case q.qpErr && q.late.len()+q.recvQ.len() > 0:
			for q.late.len() > 0 {
				q.cq.push(q.late.pop())
			}
			for q.recvQ.len() > 0 {
				r := q.recvQ.pop()
				q.cq.push(wr.Completion{ID: r.ID, Status: wr.WCWRFlushErr, Opcode: wr.WCRecv})
			}
		default:
			return n
		}
	}
	if landed > 0 {
		signal(q.room)
	}
	return n
}

// maxLandedPerPoll bounds the peer's frames one poll lands.
const maxLandedPerPoll = 256

// landLocked carries out one frame of the peer's: its bytes land in a
// receive region or a posted receive's buffer, and a completion announces
// it if it consumed a receive. A frame the peer had no right to send fails
// the transport.
func (q *QP) landLocked(f frame) {
	defer q.pool.put(f.payload)
	n := uint32(len(f.payload))
	q.inBytes -= headerSize + len(f.payload)
	switch f.op {
	case wr.OpWrite, wr.OpWriteImm:
		var dst []byte
		if n > 0 {
			b, ok := q.mem.remote(f.addr, n, f.rkey)
			if !ok {
				q.violationLocked(fmt.Errorf("tcpqp: the peer at %v wrote %d bytes at %#x outside any receive region (rkey %#x)",
					q.raddr, n, f.addr, f.rkey))
				return
			}
			dst = b
		}
		if f.op == wr.OpWrite {
			copy(dst, f.payload)
			return
		}
		if q.recvQ.len() == 0 {
			q.violationLocked(q.rnrError(f.op))
			return
		}
		r := q.recvQ.pop()
		copy(dst, f.payload)
		q.cq.push(wr.Completion{ID: r.ID, Opcode: wr.WCRecvRDMAWithImm, Imm: f.imm, ByteLen: n})
	default: // wr.OpSend, wr.OpSendImm: the reader lets no other opcode in
		if q.recvQ.len() == 0 {
			q.violationLocked(q.rnrError(f.op))
			return
		}
		r := q.recvQ.pop()
		wc := wr.Completion{ID: r.ID, Opcode: wr.WCRecv, ByteLen: n}
		if f.op == wr.OpSendImm {
			wc.Imm = f.imm
		}
		var room uint32
		if r.NumSGE == 1 {
			room = r.SGE.Length
		}
		if n > room {
			wc.Status = wr.WCLocLenErr
			q.cq.push(wc)
			q.violationLocked(fmt.Errorf("tcpqp: the peer at %v sent a %d-byte %v to a %d-byte receive", q.raddr, n, f.op, room))
			return
		}
		if n > 0 {
			dst, ok := q.mem.local(wr.SGE{Addr: r.SGE.Addr, Length: n, LKey: r.SGE.LKey}, false)
			if !ok {
				// Our own receive was bad: the completion says so.
				wc.Status = wr.WCLocProtErr
				q.cq.push(wc)
				q.enterErrorLocked()
				q.dropInboundLocked()
				return
			}
			copy(dst, f.payload)
		}
		q.cq.push(wc)
	}
}

func (q *QP) rnrError(op wr.Opcode) error {
	return fmt.Errorf("tcpqp: the peer at %v sent %v with no receive posted", q.raddr, op)
}

// violationLocked fails the transport because the peer broke the
// protocol: the queue pair goes to the error state, and what the peer sent
// after the offending frame is dropped, as a device drops what follows a
// remote access error.
func (q *QP) violationLocked(err error) {
	q.enterErrorLocked()
	q.dropInboundLocked()
	q.raiseLocked(err)
}

func (q *QP) dropInboundLocked() {
	for q.inbound.len() > 0 {
		f := q.inbound.pop()
		q.pool.put(f.payload)
	}
	q.inBytes = 0
	signal(q.room)
}
