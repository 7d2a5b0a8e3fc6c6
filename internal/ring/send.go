package ring

import (
	"encoding/binary"
	"fmt"

	"github.com/rnet-dev/rnet/internal/wr"
)

// Write copies as much of p as fits into sbuf and returns how many bytes it
// took; it never keeps p. (0, nil) means sbuf is full: wait for Writable.
// The bytes go out on the next PostSends calls, as credits allow.
func (e *Engine) Write(p []byte) (int, error) { return e.write(p, len(p)) }

// write takes up to want bytes into sbuf, copying them from p unless p is
// nil (see CommitSend), and returns how many.
func (e *Engine) write(p []byte, want int) (int, error) {
	switch {
	case e.err != nil:
		return 0, e.err
	case e.writeClosed:
		return 0, ErrWriteClosed
	case e.peerDisconnected:
		return 0, ErrPeerDisconnected
	case e.resume.waiting():
		return 0, nil // see takeover.go
	}
	n := min(want, e.SendSpace())
	if n < want {
		e.growSend() // see regions.go
	} else if n > 0 && e.sendResize.ring != 0 && !e.sendResize.grow {
		e.wantSendRing(len(e.sbuf)) // busy again: no shrink
	}
	if n == 0 {
		if want > 0 {
			e.sBacklog = true
		}
		return 0, nil
	}
	if e.sHead == e.sDone && !e.sBacklog && e.sTurn {
		e.sStart = true // nothing unsent or unacknowledged, at a turn: see sStart
	}
	e.sTurn = false
	e.sBacklog = n < want
	e.noteWrite()
	if p != nil {
		size := uint64(len(e.sbuf))
		pos := int(e.sHead % size)
		c := copy(e.sbuf[pos:], p[:n])
		copy(e.sbuf, p[c:n])
	}
	e.sHead += uint64(n)
	e.stats.BytesWritten += uint64(n)
	return n, nil
}

// CloseWrite queues a SHUTDOWN (half-close), sent once the data already
// written has been sent. If the peer already shut down its side, it queues
// a DISCONNECT instead, as rsocket does. Later Writes fail.
func (e *Engine) CloseWrite() {
	e.writeClosed = true
	k := closeShutdown
	if e.peerShutdown {
		k = closeDisconnect
	}
	e.queueClose(k)
}

// Close queues a DISCONNECT, sent once the data already written has been
// sent (like a TCP FIN after the send buffer drains). Later Reads return
// ErrClosed and Writes ErrWriteClosed. Wait for Flushed (or give up with
// Abort) before destroying the queue pair.
func (e *Engine) Close() {
	e.writeClosed = true
	e.readClosed = true
	e.queueClose(closeDisconnect)
}

// Abort is a close that does not wait for the peer's credits: it drops
// data written but not yet sent and returns how many bytes that was. If it
// dropped none, it is Close. If it dropped some, the peer must not take
// what it got for the whole stream, so no DISCONNECT (nor a SHUTDOWN still
// queued) goes out: the engine fails with ErrAborted, and the driver's
// teardown shows the peer an abrupt end (ErrPeerGone), as a TCP reset does.
func (e *Engine) Abort() (dropped uint64) {
	dropped = e.sHead - e.sPosted
	e.sHead = e.sPosted
	if dropped == 0 {
		e.Close()
		return 0
	}
	e.writeClosed, e.readClosed = true, true
	e.closePending = closeNone
	e.fail(fmt.Errorf("ring: %w (%d bytes)", ErrAborted, dropped))
	return dropped
}

func (e *Engine) queueClose(k closeKind) {
	if e.disconnectPosted || (k == closeShutdown && e.shutdownPosted) {
		return
	}
	e.closePending = max(e.closePending, k)
}

// Keepalive queues a keepalive, a 0-byte RDMA WRITE without immediate that
// the peer never sees, if nothing is in flight. Its only purpose is its
// completion: against a dead peer it fails once the transport's retries are
// exhausted, and Complete reports that. Data waiting for the peer's credits
// does not count as traffic: a writer stalled on a dead peer needs the
// probe most. If PostSends posts anything else, that goes instead. The
// driver calls it from its own timer (rsocket uses tcp_keepalive_time,
// 7200 s).
func (e *Engine) Keepalive() {
	if e.live() && e.inflightLen == 0 && e.closePending == closeNone {
		e.keepalivePending = true
	}
}

// PostSends appends the send work requests that credits, the peer's
// buffer space and the send queue allow now: credit updates first (so the
// peer can keep sending), then data transfers, then a queued close, then a
// keepalive. The driver must post them all, in order.
func (e *Engine) PostSends(dst []wr.Send) []wr.Send {
	if !e.established || e.finished() || e.disconnectPosted {
		return dst
	}
	dst = e.postCredits(dst)
	dst = e.postData(dst)
	if e.cfg.RetainUntilReceived {
		dst = e.postProbes(dst) // see retain.go
	}
	dst = e.postClose(dst)
	dst = e.postKeepalive(dst)
	return dst
}

// postData turns written bytes into transfers. rsocket's rules: a transfer
// needs a send queue entry (two in iWARP mode), a credit and room in the
// current target SGL entry; it is at most StartTransfer bytes when it
// starts what was written after an idle spell (sStart) and MaxTransfer
// otherwise (see StartTransfer for why not rsocket's doubling), and never
// crosses a target entry; a wrapped sbuf is sent with two SGEs.
func (e *Engine) postData(dst []wr.Send) []wr.Send {
	need := 1
	if e.cfg.IWARP {
		need = 2
	}
	size := uint64(len(e.sbuf))
	if e.corkHolds() {
		return dst // see cork.go
	}
	e.uncork = false
	if e.resume.sendOwn {
		dst = e.postExchange(dst) // see takeover.go
	}
	for e.sPosted < e.sHead {
		if e.sqAvail < need {
			e.stats.QueueStalls++
			break
		}
		if e.sseqNo == e.sseqComp {
			e.stats.CreditStalls++
			break
		}
		t := &e.tgt[e.tgtIdx]
		if t.Length == 0 {
			e.stats.BufferStalls++
			break
		}

		x := min(e.sHead-e.sPosted, MaxTransfer, uint64(t.Length))
		if e.sStart {
			x = min(x, StartTransfer) // see StartTransfer
			e.sStart = false
		}
		n := uint32(x)

		w := wr.Send{
			Op:         wr.OpWriteImm,
			Imm:        uint32(MakeMsg(MsgData, n)),
			Inline:     int(n) <= e.cfg.InlineThreshold,
			Signaled:   true,
			RemoteAddr: t.Addr,
			RKey:       t.Key,
		}
		pos := e.sPosted % size
		first := min(x, size-pos)
		w.SGE[0] = wr.SGE{Addr: e.send.Addr + pos, Length: uint32(first), LKey: e.send.LKey}
		w.NumSGE = 1
		if first < x {
			w.SGE[1] = wr.SGE{Addr: e.send.Addr, Length: uint32(x - first), LKey: e.send.LKey}
			w.NumSGE = 2
		}
		if w.Inline {
			e.stats.InlineSends++
		}

		// Update the target entry before anything else, as rs_write_data
		// does, so the bookkeeping never lags what was posted.
		e.useTarget(t, x, need)
		e.sPosted += x
		if e.cfg.RetainUntilReceived {
			e.sentMsgs.push(n)
		}
		e.stats.BytesSent = max(e.stats.BytesSent, e.sPosted) // see Stats.BytesSent
		e.stats.MessagesSent++

		if !e.cfg.IWARP {
			w.ID = e.pushSend(sendData, n)
			dst = append(dst, w)
			continue
		}
		w.Op = wr.OpWrite
		msg := w.Imm
		w.Imm = 0
		w.ID = e.pushSend(sendData, n)
		dst = append(dst, w)
		dst = append(dst, e.msgSend(sendDataMsg, msg))
	}
	return dst
}

// useTarget accounts a DATA message of n bytes written to the target
// entry t: the entry shrinks, and once used up the other becomes current;
// the message takes a credit and need send queue entries.
func (e *Engine) useTarget(t *RemoteSGE, n uint64, need int) {
	t.Addr += n
	t.Length -= uint32(n)
	if t.Length == 0 {
		e.tgtIdx ^= 1
	}
	e.sseqNo++
	e.sqAvail -= need
}

// postCredits sends a credit update when rsocket would: the application
// has consumed half the credit window since the last one, or half of rbuf
// is free again. In the second case the update also advertises that half by
// writing an rs_sge into the peer's target SGL, in the peer's byte order,
// alternating between its two entries.
func (e *Engine) postCredits(dst []wr.Send) []wr.Send {
	if e.peerShutdown || e.readClosed || e.recvToPost > 0 || e.creditsHeld {
		// The peer sends no more DATA, or nobody reads, or receives are
		// not back on the queue yet (granting now could invite RNR).
		return dst
	}
	withBuf := e.bufferGrantDue()
	if !withBuf && int16(e.rseqNo-e.rseqComp) < 0 {
		return dst
	}
	need := 1
	if withBuf && e.cfg.IWARP {
		need = 2
	}
	if CtrlSlots-e.ctrlInFlight < need {
		return dst
	}
	e.ctrlInFlight += need // one per work request; each completion returns one

	msg := MakeMsg(MsgSGL, uint32(e.rseqNo)+uint32(e.window))
	e.grantedSeq = e.rseqNo + e.window
	e.rseqComp = e.rseqNo + e.window/2
	e.stats.CreditUpdatesSent++
	e.ctrlSinceGrant++ // one message, one receive at the peer, no credit

	if !withBuf {
		return append(dst, e.msgSend(sendCtrl, uint32(msg)))
	}

	if e.recvMoveReady() {
		e.moveRecvRing() // see regions.go
	}
	slot := int(e.ctrlSlotSeq % CtrlSlots)
	e.ctrlSlotSeq++
	off := e.sendCtrlOff + slot*CtrlSlotSize
	var order binary.ByteOrder = binary.LittleEndian
	if e.peerBigEndian {
		order = binary.BigEndian
	}
	putRemoteSGE(e.send.Buf[off:], RemoteSGE{
		Addr:   e.rxReg.Addr + uint64(e.rbufFreeOff),
		Key:    e.rxReg.RKey,
		Length: e.half,
	}, order)
	w := wr.Send{
		Op:         wr.OpWriteImm,
		Imm:        uint32(msg),
		Inline:     e.cfg.InlineThreshold >= RemoteSGESize,
		Signaled:   true,
		NumSGE:     1,
		SGE:        [2]wr.SGE{{Addr: e.send.Addr + uint64(off), Length: RemoteSGESize, LKey: e.send.LKey}},
		RemoteAddr: e.peerTarget.Addr + uint64(e.remoteSGE)*RemoteSGESize,
		RKey:       e.peerTarget.Key,
	}

	e.gq[(e.gqHead+e.gqLen)%maxGrants] = grant{off: e.rbufFreeOff, size: e.half}
	e.gqLen++
	e.rbufAvail -= e.half
	e.rbufFreeOff += e.half
	if e.rbufFreeOff >= uint32(len(e.rbuf)) {
		e.rbufFreeOff = 0
	}
	e.remoteSGE ^= 1
	e.stats.BufferGrantsSent++

	if e.cfg.IWARP {
		w.Op = wr.OpWrite
		w.Imm = 0
		w.ID = e.pushSend(sendCtrl, 0)
		dst = append(dst, w)
		return append(dst, e.msgSend(sendCtrl, uint32(msg)))
	}
	w.ID = e.pushSend(sendCtrl, 0)
	return append(dst, w)
}

// postClose sends a queued SHUTDOWN or DISCONNECT once every written byte
// has been posted, so the peer sees EOF only after all data.
func (e *Engine) postClose(dst []wr.Send) []wr.Send {
	if e.closePending == closeNone || e.sPosted != e.sHead || e.ctrlInFlight >= CtrlSlots || e.resume.waiting() {
		return dst
	}
	kind, code := sendShutdown, CtrlShutdown
	if e.closePending == closeDisconnect {
		kind, code = sendDisconnect, CtrlDisconnect
		e.disconnectPosted = true
	} else {
		e.shutdownPosted = true
	}
	e.closePending = closeNone
	e.ctrlInFlight++
	e.ctrlSinceGrant++ // takes a receive the peer's credits do not cover
	return append(dst, e.msgSend(kind, uint32(MakeMsg(MsgCtrl, code))))
}

func (e *Engine) postKeepalive(dst []wr.Send) []wr.Send {
	if !e.keepalivePending || e.ctrlInFlight >= CtrlSlots {
		return dst
	}
	if e.inflightLen > 0 {
		// Something else went out: its completion probes the peer.
		e.keepalivePending = false
		return dst
	}
	e.keepalivePending = false
	e.ctrlInFlight++
	e.stats.KeepalivesSent++
	// rsocket posts it with no wr.SGE, remote address 0 and rkey 0: a 0-byte
	// RDMA WRITE touches no memory, so neither is checked.
	return append(dst, wr.Send{ID: e.pushSend(sendCtrl, 0), Op: wr.OpWrite, Signaled: true})
}

// msgSend builds a message with no payload: a 0-byte RDMA WRITE WITH
// IMMEDIATE, or in iWARP mode an inline SEND of the message word in host
// byte order. The caller has already taken the SQ entry or control slot.
func (e *Engine) msgSend(kind sendKind, msg uint32) wr.Send {
	if !e.cfg.IWARP {
		return wr.Send{ID: e.pushSend(kind, 0), Op: wr.OpWriteImm, Imm: msg, Signaled: true}
	}
	id := e.pushSend(kind, 0)
	off := e.sendMsgOff + int(id%uint64(e.cfg.SendQueueSize))*MsgWordSize
	binary.NativeEndian.PutUint32(e.send.Buf[off:], msg)
	return wr.Send{
		ID:       id,
		Op:       wr.OpSend,
		Inline:   true,
		Signaled: true,
		NumSGE:   1,
		SGE:      [2]wr.SGE{{Addr: e.send.Addr + uint64(off), Length: MsgWordSize, LKey: e.send.LKey}},
	}
}

// pushSend records a send in flight and returns its work request ID. The
// callers' accounting (sqAvail + control slots <= SendQueueSize) guarantees room.
func (e *Engine) pushSend(kind sendKind, bytes uint32) uint64 {
	i := (e.inflightHead + e.inflightLen) % len(e.inflight)
	e.inflight[i] = sendRecord{kind: kind, bytes: bytes}
	e.inflightLen++
	id := e.sendSeq
	e.sendSeq++
	return id
}

// completeSend gives back what a send held. Sends of one queue pair
// complete in posting order (every one is signalled), so the completion
// must carry the ID of the oldest send in flight.
func (e *Engine) completeSend(wc *wr.Completion) {
	if wc.Status != wr.WCSuccess && wc.ID != e.sendDoneSeq && wc.ID-e.sendDoneSeq < uint64(e.inflightLen) {
		e.loseSends(wc) // see lost.go
	}
	if e.inflightLen == 0 || wc.ID != e.sendDoneSeq {
		e.fail(fmt.Errorf("ring: %w: send ID %d, expected %d (%d in flight)",
			ErrUnknownCompletion, wc.ID, e.sendDoneSeq, e.inflightLen))
		return
	}
	rec := e.inflight[e.inflightHead]
	e.inflightHead = (e.inflightHead + 1) % len(e.inflight)
	e.inflightLen--
	e.sendDoneSeq++
	e.stats.SendCompletions++
	wasLive := e.live()

	switch rec.kind {
	case sendData:
		e.sDone += uint64(rec.bytes)
		e.sTail = e.sDone
		if e.cfg.RetainUntilReceived {
			e.sTail = min(e.sDone, e.sReleased)
		}
		e.sqAvail++
	case sendDataMsg:
		e.sqAvail++
	case sendExchange:
		e.sqAvail++
		e.resume.ownDone = true
	case sendCtrl:
		e.ctrlInFlight--
	case sendShutdown:
		e.ctrlInFlight--
		e.shutdownDone = true
	case sendDisconnect:
		e.ctrlInFlight--
		e.disconnectDone = true
	}
	if wc.Status != wr.WCSuccess {
		e.stats.ErrorCompletions++
		if wasLive || isFlush(e.err) {
			e.fail(&CompletionError{ID: wc.ID, Status: wc.Status, VendorErr: wc.VendorErr})
		}
	}
}
