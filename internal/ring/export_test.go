package ring

import "fmt"

// CheckInvariants verifies the engine's accounting. Property tests call it
// after every step.
func (e *Engine) CheckInvariants() error {
	size := uint64(len(e.sbuf))
	switch {
	case !(e.sTail <= e.sPosted && e.sPosted <= e.sHead):
		return fmt.Errorf("sbuf counters out of order: tail %d posted %d head %d", e.sTail, e.sPosted, e.sHead)
	case e.sHead-e.sTail > size:
		return fmt.Errorf("sbuf overfull: %d of %d", e.sHead-e.sTail, size)
	case e.established && e.sseqComp-e.sseqNo > e.creditBound():
		return fmt.Errorf("negative or excess credits: comp %d sent %d peer window %d", e.sseqComp, e.sseqNo, e.peerCredits)
	case e.ctrlInFlight < 0 || e.ctrlInFlight > CtrlSlots:
		return fmt.Errorf("control slots in flight: %d", e.ctrlInFlight)
	case e.sqAvail < 0:
		return fmt.Errorf("data SQ entries: %d", e.sqAvail)
	case e.inflightLen > e.cfg.SendQueueSize:
		return fmt.Errorf("sends in flight %d > SQ %d", e.inflightLen, e.cfg.SendQueueSize)
	case e.recvPosted-e.recvDone > uint64(e.recvDepth):
		return fmt.Errorf("receives outstanding %d > depth %d", e.recvPosted-e.recvDone, e.recvDepth)
	case e.msgCount > len(e.msgs):
		return fmt.Errorf("message queue %d > %d", e.msgCount, len(e.msgs))
	}
	var data, ctrl int
	var bytes uint64
	for i := 0; i < e.inflightLen; i++ {
		r := e.inflight[(e.inflightHead+i)%len(e.inflight)]
		switch r.kind {
		case sendData:
			data++
			bytes += uint64(r.bytes)
		case sendDataMsg, sendExchange:
			data++
		default:
			ctrl++
		}
	}
	if data+e.sqAvail != e.cfg.SendQueueSize-CtrlSlots {
		return fmt.Errorf("data SQ entries: %d in flight + %d free != %d", data, e.sqAvail, e.cfg.SendQueueSize-CtrlSlots)
	}
	if ctrl != e.ctrlInFlight {
		return fmt.Errorf("control in flight: %d records, counter %d", ctrl, e.ctrlInFlight)
	}
	if bytes != e.sPosted-e.sDone-e.sLost {
		return fmt.Errorf("sbuf bytes in flight: %d records, counters %d (%d lost)", bytes, e.sPosted-e.sDone-e.sLost, e.sLost)
	}
	if err := e.checkRetained(); err != nil {
		return err
	}
	// The current ring: every byte is free, granted and not yet filled,
	// or filled and not yet read. Grants alive hold every unread byte.
	var cur, unread uint64
	oldSeen, curSeen := false, false
	for i := 0; i < e.gqLen; i++ {
		g := e.gq[(e.gqHead+i)%maxGrants]
		read := uint32(0)
		if i == 0 {
			read = e.readOff
		}
		switch {
		case g.filled > g.size || read > g.filled:
			return fmt.Errorf("grant %d: size %d filled %d read %d", i, g.size, g.filled, read)
		case i < e.gqFilled && g.filled != g.size:
			return fmt.Errorf("grant %d counted full with %d of %d", i, g.filled, g.size)
		case i > e.gqFilled && g.filled != 0:
			return fmt.Errorf("grant %d filled %d before the one ahead of it", i, g.filled)
		case g.old && curSeen:
			return fmt.Errorf("grant %d of the retired ring after one of the current", i)
		}
		oldSeen = oldSeen || g.old
		curSeen = curSeen || !g.old
		if !g.old {
			cur += uint64(g.size - read)
		}
		unread += uint64(g.filled - read)
	}
	switch {
	case e.gqFilled > e.gqLen || e.gqLen > maxGrants:
		return fmt.Errorf("grants: %d alive, %d full", e.gqLen, e.gqFilled)
	case oldSeen != e.rxOldLive:
		return fmt.Errorf("retired ring live %v, its grants alive %v", e.rxOldLive, oldSeen)
	case uint64(e.rbufAvail)+cur != uint64(len(e.rbuf)):
		return fmt.Errorf("rbuf: avail %d + granted or unread %d != %d", e.rbufAvail, cur, len(e.rbuf))
	case unread != e.unread:
		return fmt.Errorf("grants hold %d unread bytes, counter %d", unread, e.unread)
	}
	var queued uint64
	for i := 0; i < e.msgCount; i++ {
		queued += uint64(e.msgs[(e.msgHead+i)%len(e.msgs)])
	}
	if queued != e.unread {
		return fmt.Errorf("queued messages hold %d bytes, unread %d", queued, e.unread)
	}
	if out := e.recvDataSeq - e.rseqNo; int(out) != e.msgCount {
		return fmt.Errorf("received %d, consumed %d, queued %d", e.recvDataSeq, e.rseqNo, e.msgCount)
	}
	return nil
}

// checkRetained verifies that sTail follows the completions, or with
// RetainUntilReceived also the peer's credits, and that the lengths kept
// add up to the bytes not yet shown consumed.
func (e *Engine) checkRetained() error {
	if !e.cfg.RetainUntilReceived {
		if e.sTail != e.sDone || e.sReleased != 0 || e.sentMsgs.n != 0 {
			return fmt.Errorf("not retaining, yet tail %d done %d released %d, %d lengths kept", e.sTail, e.sDone, e.sReleased, e.sentMsgs.n)
		}
		return nil
	}
	if e.sTail != min(e.sDone, e.sReleased) || e.sReleased > e.sPosted {
		return fmt.Errorf("retaining: tail %d, done %d, released %d, posted %d", e.sTail, e.sDone, e.sReleased, e.sPosted)
	}
	var kept uint64
	for i := 0; i < e.sentMsgs.n; i++ {
		kept += uint64(e.sentMsgs.lens[(e.sentMsgs.head+i)%len(e.sentMsgs.lens)])
	}
	if kept != e.sPosted-e.sReleased {
		return fmt.Errorf("retaining: %d bytes in kept lengths, %d posted and not released", kept, e.sPosted-e.sReleased)
	}
	if e.established && e.sentMsgs.n != int(e.sseqNo-(e.sseqComp-e.peerCredits)) {
		return fmt.Errorf("retaining: %d lengths kept, %d messages not shown consumed", e.sentMsgs.n, e.sseqNo-(e.sseqComp-e.peerCredits))
	}
	return nil
}

// SentLengthsCap is how many message lengths the engine has room for
// (RetainUntilReceived).
func (e *Engine) SentLengthsCap() int { return cap(e.sentMsgs.lens) }
