package ring

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/rnet-dev/rnet/internal/wr"
)

// Read copies received bytes into p. It returns (0, nil) when nothing has
// arrived yet, (0, io.EOF) once the peer has closed its side and every
// byte has been read, and the connection's error after a failure.
// Consuming messages is what earns the peer new credits: call PostSends
// afterwards. On a resumed queue pair it returns nothing before TakeOver
// (the connection's error, if it failed): the peer may have taken over
// first, and what it sent again must wait behind the old queue pair's
// unread bytes, which TakeOver brings.
func (e *Engine) Read(p []byte) (int, error) {
	switch {
	case e.readClosed:
		return 0, ErrClosed
	case e.resume.waiting():
		return 0, e.err
	case e.err != nil && e.msgCount == 0 && len(e.carry) == 0:
		return 0, e.err
	case len(p) == 0:
		return 0, nil
	}
	// Bytes that arrived before a failure are still read, as TCP reads
	// what came before a reset: their messages passed every check, and
	// the peer counts them as delivered. The error comes after them.
	n := e.take(p, len(p))
	if n == 0 && e.err != nil {
		return 0, e.err
	}
	if n == 0 && (e.peerShutdown || e.peerDisconnected) {
		return 0, io.EOF
	}
	return n, nil
}

// take consumes up to want received bytes, copying them into p unless p is
// nil (see ConsumeRecv), and returns how many.
func (e *Engine) take(p []byte, want int) int {
	n := 0
	if len(e.carry) > 0 {
		// Bytes received on the failed queue pair come first (see
		// takeover.go).
		n = min(want, len(e.carry))
		if p != nil {
			copy(p, e.carry[:n])
		}
		e.carry = e.carry[n:]
	}
	for n < want && e.msgCount > 0 {
		left := e.msgs[e.msgHead]
		k := left
		if rest := want - n; rest < int(k) {
			k = uint32(rest) // not min in uint32: want may exceed 4 GiB
		}
		// A message never spans two grants (transfers are capped by the
		// target entry), and the oldest grant holds the oldest bytes.
		g := &e.gq[e.gqHead]
		buf := e.rbuf
		if g.old {
			buf = e.rxOld.Buf
		}
		at := g.off + e.readOff
		if p != nil {
			copy(p[n:], buf[at:at+k])
		}
		n += int(k)
		e.readOff += k
		if !g.old {
			e.rbufAvail += k
		}
		if e.readOff == g.size {
			e.popGrant()
		}
		e.unread -= uint64(k)
		if k == left {
			e.msgHead++
			if e.msgHead == len(e.msgs) {
				e.msgHead = 0
			}
			e.msgCount--
			e.rseqNo++
		} else {
			e.msgs[e.msgHead] = left - k
		}
	}
	e.stats.BytesRead += uint64(n)
	if n > 0 {
		e.sTurn = true // see sStart
	}
	return n
}

// popGrant drops the oldest grant, filled and read, and releases the
// retired ring with its last grant.
func (e *Engine) popGrant() {
	old := e.gq[e.gqHead].old
	e.gq[e.gqHead] = grant{}
	e.gqHead = (e.gqHead + 1) % maxGrants
	e.gqLen--
	e.gqFilled--
	e.readOff = 0
	if old && (e.gqLen == 0 || !e.gq[e.gqHead].old) {
		e.releaseOldRing()
	}
}

// PostRecvs appends the receives to post: all RecvQueueSize+RecvHeadroom before
// connecting, then one for each receive completion. Receives carry no
// buffer, except in iWARP mode where each gets a 4-byte slot after rbuf for
// the message word.
func (e *Engine) PostRecvs(dst []wr.Recv) []wr.Recv {
	if e.err != nil || (e.established && e.finished()) {
		return dst
	}
	for ; e.recvToPost > 0; e.recvToPost-- {
		w := wr.Recv{ID: RecvIDFlag | e.recvPosted}
		if e.cfg.IWARP {
			w.NumSGE = 1
			w.SGE = wr.SGE{
				Addr:   e.recv.Addr + uint64(e.recvSlotOffset(e.recvPosted)),
				Length: MsgWordSize,
				LKey:   e.recv.LKey,
			}
		}
		e.recvPosted++
		dst = append(dst, w)
	}
	return dst
}

func (e *Engine) recvSlotOffset(seq uint64) int {
	return e.layout.RecvMsgOffset + int(seq%uint64(e.recvDepth))*MsgWordSize
}

// ParseMsg decodes a message word received from a peer and rejects the
// operations that must never appear on the wire: the reserved opcodes 1, 3
// and 5, WRITE (2, local bookkeeping only) and unknown control codes.
// IOMAP_SGL is well formed here; whether it is acceptable depends on the
// connection (the engine advertises no iomap, so it refuses it).
func ParseMsg(imm uint32) (Msg, error) {
	m := Msg(imm)
	switch m.Op() {
	case MsgData, MsgSGL, MsgIOMapSGL:
		return m, nil
	case MsgCtrl:
		switch m.Data() {
		case CtrlDisconnect, CtrlKeepalive, CtrlShutdown:
			return m, nil
		}
		return m, protoErr(ErrBadControl, m, "unknown control code")
	}
	return m, protoErr(ErrReservedOpcode, m, "opcode is not allowed on the wire")
}

// completeRecv handles one receive completion: the peer's message.
func (e *Engine) completeRecv(wc *wr.Completion) {
	seq := wc.ID &^ RecvIDFlag
	switch {
	case e.cfg.SharedRecv && e.recvDone >= e.recvPosted+RecvHeadroom:
		// The peer's messages took more receives of the shared queue
		// than were posted for this connection, and more than a peer
		// that keeps to the protocol borrows while our receives are not
		// back yet (see RecvHeadroom).
		e.fail(protoErr(ErrCreditOverrun, 0, fmt.Sprintf("message %d with %d receives posted for it", e.recvDone+1, e.recvPosted)))
		return
	case e.cfg.SharedRecv:
		// Any receive of the shared queue serves: completions are counted.
		seq = e.recvDone
	case wc.Status != wr.WCSuccess && seq > e.recvDone && seq < e.recvPosted:
		e.loseRecvs(seq, wc) // see lost.go
	case e.recvDone == e.recvPosted || seq != e.recvDone:
		e.fail(fmt.Errorf("ring: %w: receive ID %d, expected %d (%d posted)",
			ErrUnknownCompletion, seq, e.recvDone, e.recvPosted-e.recvDone))
		return
	}
	e.recvDone++
	e.stats.RecvCompletions++
	if wc.Status != wr.WCSuccess {
		e.stats.ErrorCompletions++
		if e.live() || isFlush(e.err) {
			e.fail(&CompletionError{ID: wc.ID, Status: wc.Status, VendorErr: wc.VendorErr, Recv: true})
		}
		return
	}
	if !e.established {
		e.fail(fmt.Errorf("ring: %w: message received before Establish", ErrNotEstablished))
		return
	}
	if e.finished() {
		// Once the exchange is over nothing the peer says matters, except
		// that data after its DISCONNECT or SHUTDOWN shows it broken: its
		// bytes must not pass for part of the stream it said was over.
		// (Data that crossed our own DISCONNECT is not its fault.)
		if word, ok := e.msgWord(wc, seq); ok && e.err == nil && Msg(word).Op() == MsgData {
			switch {
			case e.peerDisconnected:
				e.fail(protoErr(ErrDataAfterDisconnect, Msg(word), ""))
			case e.peerShutdown:
				e.fail(protoErr(ErrDataAfterShutdown, Msg(word), ""))
			}
		}
		return
	}
	e.recvToPost++

	word, ok := e.msgWord(wc, seq)
	if !ok {
		e.fail(protoErr(ErrBadMessage, 0, fmt.Sprintf("receive completion opcode %d, %d bytes", wc.Opcode, wc.ByteLen)))
		return
	}
	m, err := ParseMsg(word)
	if err != nil {
		e.fail(err)
		return
	}
	switch m.Op() {
	case MsgData:
		if !e.cfg.IWARP && wc.ByteLen != m.Data() {
			// The bytes the RDMA WRITE carried are the message: a length
			// that claims more would hand the reader stale bytes of the
			// ring as if they had just arrived.
			e.fail(protoErr(ErrBadMessage, m, fmt.Sprintf("the write carried %d bytes", wc.ByteLen)))
			return
		}
		e.recvData(m)
	case MsgSGL:
		e.recvCredits(m, wc)
	case MsgIOMapSGL:
		e.fail(protoErr(ErrUnexpectedIOMap, m, "iomap size 0 was advertised"))
	case MsgCtrl:
		switch m.Data() {
		case CtrlDisconnect:
			e.peerDisconnected = true
		case CtrlShutdown:
			e.peerShutdown = true
		case CtrlKeepalive:
			// rsocket's keepalive carries no immediate; accept one anyway.
		}
	}
}

// msgWord extracts the message word of a successful receive completion:
// the immediate, or in iWARP mode the 4 bytes the SEND put in the receive's
// slot. ok is false when the completion cannot carry a message.
func (e *Engine) msgWord(wc *wr.Completion, seq uint64) (word uint32, ok bool) {
	switch {
	case e.cfg.IWARP && wc.Opcode == wr.WCRecv && wc.ByteLen == MsgWordSize:
		return binary.NativeEndian.Uint32(e.recv.Buf[e.recvSlotOffset(seq):]), true
	case !e.cfg.IWARP && wc.Opcode == wr.WCRecvRDMAWithImm:
		return wc.Imm, true
	}
	return 0, false
}

// recvData checks a DATA message against the credits and the rbuf space
// the peer was granted, and queues its bytes for Read.
func (e *Engine) recvData(m Msg) {
	if e.peerShutdown {
		e.fail(protoErr(ErrDataAfterShutdown, m, ""))
		return
	}
	if e.recvDataSeq == e.grantedSeq {
		e.fail(protoErr(ErrCreditOverrun, m, fmt.Sprintf("message %d, credits up to %d", e.recvDataSeq+1, e.grantedSeq)))
		return
	}
	n := m.Data()
	if e.resume.awaitPeer && n != ExchangeSize {
		e.fail(protoErr(ErrBadMessage, m, fmt.Sprintf("the first DATA message on a resumed queue pair has %d bytes, not the exchange's %d", n, ExchangeSize)))
		return
	}
	var g *grant
	if n > 0 {
		var left uint32
		if e.gqFilled < e.gqLen {
			g = &e.gq[(e.gqHead+e.gqFilled)%maxGrants]
			left = g.size - g.filled
		}
		if n > left {
			e.fail(protoErr(ErrDataOverrun, m, fmt.Sprintf("%d bytes, %d left in the granted half", n, left)))
			return
		}
	}
	e.recvDataSeq++
	e.stats.MessagesReceived++
	if e.recvDataSeq == e.grantedSeq && int(e.window) < e.cfg.RecvQueueSize {
		// The peer used every credit: the window limits the stream.
		e.creditWish = min(int(e.window), e.cfg.RecvQueueSize-int(e.window))
	}
	if n == 0 {
		// Nothing to read: the message is consumed as it arrives.
		e.rseqNo++
		return
	}
	if e.msgCount == len(e.msgs) {
		// Unreachable while the credit check holds; never index out of range.
		e.fail(protoErr(ErrCreditOverrun, m, "message queue full"))
		return
	}
	g.filled += n
	// A sender splits a write where a transfer reaches its size limit or
	// the granted half ends. The limits are powers of two from
	// StartTransfer to MaxTransfer (rsocket doubles from the first; we keep
	// to it); any other transfer that leaves room in the half ended a write.
	e.cutShort = n >= StartTransfer && n&(n-1) == 0 || g.filled == g.size
	if g.filled == g.size {
		e.gqFilled++
		if !g.old && (n == g.size || e.gqFilled == e.gqLen) {
			// The sender had a whole half to send, or it has used every
			// byte it was granted: the ring limits the stream.
			e.growRecv()
		}
	}
	i := e.msgHead + e.msgCount
	if i >= len(e.msgs) {
		i -= len(e.msgs)
	}
	e.msgs[i] = n
	e.msgCount++
	e.unread += uint64(n)
	e.stats.BytesReceived += uint64(n)
	if e.resume.awaitPeer {
		e.takePeerExchange() // see takeover.go
	}
}

// MoreMayFollow reports whether the last DATA message that carried bytes
// may be the first part of a longer write whose rest is still on its way:
// its size was one where senders cut transfers (a power of two from
// StartTransfer up), or it filled the half of the receive ring granted to
// it. A reader that has
// consumed everything can then expect more at once; after a shorter
// message it can not.
func (e *Engine) MoreMayFollow() bool { return e.cutShort }

// maxCreditWindow bounds a credit grant's step from a peer whose window
// grows (FlagGrowingCredits).
const maxCreditWindow = 0x7FFF

// creditBound is the most credits the peer may grant ahead of our sends.
func (e *Engine) creditBound() uint16 {
	if e.peerGrows {
		return max(e.peerCredits, maxCreditWindow)
	}
	return e.peerCredits
}

// recvCredits applies a credit grant and takes any SGL update the peer
// wrote into our target region.
func (e *Engine) recvCredits(m Msg, wc *wr.Completion) {
	comp := uint16(m.Data()) // rsocket sends rseq_no + rq_size unmasked; only 16 bits count
	// A peer whose private data says its window grows may grant more than
	// the credits it advertised, but no window reaches half the 16-bit
	// sequence space, so a larger step is one that goes back.
	bound := e.creditBound()
	if comp-e.sseqComp > bound {
		e.fail(protoErr(ErrBadCredits, m, fmt.Sprintf("limit %d goes back from %d", comp, e.sseqComp)))
		return
	}
	if comp-e.sseqNo > bound {
		e.fail(protoErr(ErrBadCredits, m, fmt.Sprintf("limit %d with %d sent and %d credits", comp, e.sseqNo, e.peerCredits)))
		return
	}
	// The grant's SGL update, if any, is checked before its limit
	// releases any retained byte: a malformed message releases nothing.
	if e.cfg.IWARP {
		e.takeSGLUpdates(m)
	} else {
		// On RoCE and InfiniBand an SGL update travels in the same RDMA
		// WRITE WITH IMMEDIATE as its credit message, so the completion
		// says whether this message carried one, and that it has landed.
		switch wc.ByteLen {
		case 0:
		case RemoteSGESize:
			e.takeLandedSGLUpdate(m)
		default:
			e.fail(protoErr(ErrBadSGL, m, fmt.Sprintf("credit message wrote %d bytes into the target SGL, want 0 or %d", wc.ByteLen, RemoteSGESize)))
		}
	}
	if e.err != nil {
		return
	}
	if e.cfg.RetainUntilReceived {
		e.releaseConsumed(comp, m)
		if e.err != nil {
			return
		}
	}
	e.sseqComp = comp
	e.ctrlSinceGrant = 0
	e.stats.CreditUpdatesReceived++
}
