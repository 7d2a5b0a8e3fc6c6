package ring

// Lending ring memory: a driver that copies between the rings and a
// reader or writer of its user's must not call them with its lock held,
// so it borrows the ring's memory, lets the lock go for the copy, and
// settles under the lock again. What is lent stays put meanwhile: bytes
// not yet read stay in their region until consumed (a moved receive ring is
// retired only once its last grant is read), and LendSend pins sbuf to its
// region until CommitSend. The driver must keep the region mapped while
// the loan runs, whatever the engine retires or the connection's close
// releases meanwhile.

// RecvSpan returns the oldest received bytes not yet read that lie
// together in one grant, without consuming them; nil when there are none
// (or Read would fail, or hand out nothing yet: see Read). Only
// ConsumeRecv, Read and CloseRead's discard move past them, and a driver
// that lends them out allows none of those until it consumes.
func (e *Engine) RecvSpan() []byte {
	if e.readClosed || e.resume.waiting() {
		return nil
	}
	if len(e.carry) > 0 {
		return e.carry[:len(e.carry):len(e.carry)]
	}
	if e.msgCount == 0 {
		return nil
	}
	g := &e.gq[e.gqHead]
	buf := e.rbuf
	if g.old {
		buf = e.rxOld.Buf
	}
	// Messages of one grant lie back to back from its start, so the
	// unread ones of the oldest grant are contiguous.
	var k uint32
	room := g.size - e.readOff
	for i, left := e.msgHead, e.msgCount; left > 0 && k < room; left-- {
		k += e.msgs[i]
		if i++; i == len(e.msgs) {
			i = 0
		}
	}
	k = min(k, room)
	at := g.off + e.readOff
	return buf[at : at+k : at+k]
}

// ConsumeRecv reads n bytes as Read would, without copying them anywhere:
// the driver has handed them out from RecvSpan. Consuming earns the peer
// credits as Read does: call PostSends afterwards.
func (e *Engine) ConsumeRecv(n int) {
	if e.readClosed || n <= 0 || e.resume.waiting() {
		return
	}
	e.take(nil, n)
}

// LendSend returns the free space at the head of the send ring, as much of
// it as lies together, for the driver to fill; sbuf stays in its region
// until CommitSend, which must follow. It returns nil when there is no room
// (wait for Writable) or Write would fail.
func (e *Engine) LendSend() []byte {
	if e.err != nil || e.writeClosed || e.peerDisconnected {
		return nil
	}
	space := e.SendSpace()
	if space == 0 {
		return nil
	}
	pos := int(e.sHead % uint64(len(e.sbuf)))
	end := pos + min(space, len(e.sbuf)-pos)
	e.sendLent = true
	return e.sbuf[pos:end:end]
}

// CommitSend ends the loan LendSend began: the first n bytes the driver
// wrote into it are written, as Write would have taken them. If the
// connection failed or was closed meanwhile they are dropped, and the
// error is what Write would return.
func (e *Engine) CommitSend(n int) (int, error) {
	if !e.sendLent {
		return 0, nil
	}
	e.sendLent = false
	full := n > 0 && n == e.SendSpace()
	written, err := e.write(nil, n)
	if full && err == nil {
		// The reader filled the ring: it streams, so grow as a Write that
		// did not fit would.
		e.growSend()
		e.sBacklog = true
	}
	if e.sendResize.has && e.sendDrained() {
		e.moveSendRing()
	}
	return written, err
}
