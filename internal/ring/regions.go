package ring

import "errors"

// Rings that grow and shrink.
//
// A connection starts with both rings at Config.IdleBufferSize and moves a
// ring to a larger region when it is busy, and back to a small one when it
// has been quiet, up to SendBufferSize and RecvBufferSize. The engine
// cannot register memory, so it asks the driver for regions (RegionWanted,
// AddRegion) and hands back the ones it no longer uses (RetiredRegions).
//
// Receive ring (RoCE and InfiniBand). The protocol lets a receiver grant
// any memory it likes: the sender writes where the latest SGL update
// points, fills each grant completely before it moves to the next, and
// never lets one DATA message span two grants. So when a grant is due the
// engine may advertise the first half of a new region instead of the next
// half of the current one; the current ring is then retired, and Read
// moves on to the new ring once every byte granted from the old one has
// arrived and been read, at which point the old region goes back to the
// driver. Growth is asked for when a DATA message fills a whole grant of
// the current ring (the sender had at least a half to send, so our halves
// cap its transfers), or when the peer fills the last grant it holds (it
// has nowhere left to write: a C sender whose sends are smaller than a
// half, which rsocket splits into transfers from 2 KiB up, shows it this
// way). A reader that does not keep up makes the ring grow too, up to its
// maximum, as a sender with little to send leaves it small. Shrinking is
// asked for by Quiet. Two limits follow from the protocol: a peer keeps the grants it holds, so a retired region
// is released only once the peer has filled them (an idle peer holding
// both halves of a large ring keeps it pinned); and a connection that was
// never busy never grows.
//
// On iWARP the receive ring stays at RecvBufferSize from the start: there
// an SGL update lands separately from its message, and an rnet sender can
// tell a torn update from a finished one only by comparing it with the
// half it expects (see sgl.go), so the halves must never move.
//
// Send ring (both transports; it is local). It grows when a Write could
// not take all its bytes. The send region also holds the control slots and
// the iWARP message words that posted sends point to, so the ring moves
// only when nothing is in flight: while a growth is pending Write takes no
// bytes, and the move happens once every byte written has been sent and
// acknowledged. It shrinks, after Quiet, at the first moment it is empty.

// RegionKind says which ring a region is for.
type RegionKind uint8

const (
	// RegionSend is a send region: the ring, CtrlSlots control slots and
	// (iWARP) a message word per send queue entry. Register it
	// LOCAL_WRITE only.
	RegionSend RegionKind = iota + 1
	// RegionRecv is a receive ring. Register it LOCAL_WRITE|REMOTE_WRITE.
	RegionRecv
)

func (k RegionKind) String() string {
	switch k {
	case RegionSend:
		return "send"
	case RegionRecv:
		return "receive"
	}
	return "region kind " + utoa(uint64(k))
}

// ErrRegionNotWanted is returned by AddRegion for a region the engine did
// not ask for, or one too small.
var ErrRegionNotWanted = errors.New("ring: region not wanted")

// growthFactor is how much larger a growing ring becomes each time, up to
// its maximum: three steps from 16 KiB to 1 MiB.
const growthFactor = 4

// RegionWanted reports a region the engine wants: which ring it is for
// and how many bytes it must have. The driver registers one (see
// RegionKind for the access) and calls AddRegion, or DeclineRegion if it
// cannot. Call it after each step of the engine.
func (e *Engine) RegionWanted() (kind RegionKind, size int, ok bool) {
	if !e.live() {
		return 0, 0, false
	}
	if r := &e.sendResize; r.ring != 0 && !r.has {
		return RegionSend, e.cfg.sendRegionSize(r.ring), true
	}
	if r := &e.recvResize; r.ring != 0 && !r.has {
		return RegionRecv, r.ring, true
	}
	return 0, 0, false
}

// RegionWork reports whether RegionWanted or RetiredRegions has something:
// a cheap test for the driver's hot path.
func (e *Engine) RegionWork() bool {
	return e.nRetired > 0 || e.sendResize.ring != 0 && !e.sendResize.has ||
		e.recvResize.ring != 0 && !e.recvResize.has
}

// AddRegion hands the engine the region RegionWanted asked for. The
// engine uses it from the next move of that ring on and hands it back
// through RetiredRegions when done. An error means the engine did not
// take it: the driver keeps it and should release it.
func (e *Engine) AddRegion(kind RegionKind, r Region) error {
	var rs *resize
	need := 0
	switch kind {
	case RegionSend:
		rs, need = &e.sendResize, e.cfg.sendRegionSize(e.sendResize.ring)
	case RegionRecv:
		rs, need = &e.recvResize, e.recvResize.ring
	default:
		return ErrRegionNotWanted
	}
	if rs.ring == 0 || rs.has || !e.live() {
		return ErrRegionNotWanted
	}
	if err := checkRegion(kind.String(), r, need); err != nil {
		return err
	}
	rs.region, rs.has = r, true
	if kind == RegionSend && !e.sendLent && e.sendDrained() {
		e.moveSendRing()
	}
	return nil
}

// DeclineRegion tells the engine the driver could not make the region
// RegionWanted asked for (the locked-memory limit, say). The ring stays as
// it is, and the engine asks again only after the next Quiet.
func (e *Engine) DeclineRegion(kind RegionKind) {
	rs := &e.recvResize
	if kind == RegionSend {
		rs = &e.sendResize
	}
	if rs.ring == 0 || rs.has {
		return
	}
	*rs = resize{declined: true}
	e.stats.RegionsDeclined++
}

// RetiredRegions appends the regions the engine no longer uses to dst and
// forgets them: the driver deregisters them. The peer can reach none of
// them through a grant any more.
func (e *Engine) RetiredRegions(dst []Region) []Region {
	dst = append(dst, e.retired[:e.nRetired]...)
	clear(e.retired[:e.nRetired])
	e.nRetired = 0
	return dst
}

// RecvMovePending reports that the next buffer grant will come from a
// region of another size, which the engine already holds.
func (e *Engine) RecvMovePending() bool { return e.recvResize.has }

// RingSizes returns the current sizes of the send and the receive ring.
func (e *Engine) RingSizes() (send, recv int) { return len(e.sbuf), len(e.rbuf) }

// Quiet is called by the driver at a steady pace (rnet: its keepalive or
// housekeeping tick). If no byte was written since the previous call, the
// send ring is to shrink to its idle size, and likewise the receive ring
// if no byte was received. It also lets a declined ring ask again. A
// driver may skip a call (rnet does when its tick ran late or found the
// peer silent): the next one compares with the last one made.
func (e *Engine) Quiet() {
	sendQuiet := e.stats.BytesWritten == e.quietWritten
	recvQuiet := e.stats.BytesReceived == e.quietReceived
	e.quietWritten, e.quietReceived = e.stats.BytesWritten, e.stats.BytesReceived
	e.sendResize.declined = false
	e.recvResize.declined = false
	if !e.live() {
		return
	}
	if sendQuiet {
		e.wantSendRing(e.cfg.InitialSendRing())
	}
	if recvQuiet && !e.cfg.IWARP {
		e.wantRecvRing(e.cfg.InitialRecvRing())
	}
}

// wantSendRing asks for a send ring of size bytes, replacing a different
// request; size equal to the current ring cancels one.
func (e *Engine) wantSendRing(size int) {
	e.want(&e.sendResize, size, len(e.sbuf))
}

func (e *Engine) wantRecvRing(size int) {
	e.want(&e.recvResize, size&^1, len(e.rbuf))
}

func (e *Engine) want(rs *resize, size, cur int) {
	if rs.declined || rs.ring == size || size == cur && rs.ring == 0 {
		return
	}
	if rs.has {
		e.retire(rs.region)
	}
	*rs = resize{}
	if size != cur {
		*rs = resize{ring: size, grow: size > cur}
	}
}

// growSend is called when a Write could not take all its bytes.
func (e *Engine) growSend() {
	if cur := len(e.sbuf); cur < e.cfg.SendBufferSize && !e.sendResize.grow {
		e.wantSendRing(min(e.cfg.SendBufferSize, growthFactor*cur))
	}
}

// growRecv is called when a DATA message filled a whole grant of the
// current ring, or the last grant the peer held.
func (e *Engine) growRecv() {
	if cur := len(e.rbuf); cur < e.cfg.RecvBufferSize && !e.recvResize.grow && !e.cfg.IWARP {
		e.wantRecvRing(min(e.cfg.RecvBufferSize, growthFactor*cur))
	}
}

func (e *Engine) retire(r Region) {
	if r.Buf == nil && r.Addr == 0 || e.nRetired == len(e.retired) {
		// Unreachable while the driver collects after every step (a
		// step retires at most a few); the driver frees every region at
		// teardown anyway.
		return
	}
	e.retired[e.nRetired] = r
	e.nRetired++
}

// sendDrained reports that the send ring may move: no send is in flight,
// so no work request points into the send region, and every byte written
// was sent and acknowledged, or with RetainUntilReceived the bytes still
// held fit the new ring, which takes them along (a ring that waited for
// the peer to show them consumed could wait for ever: a peer sends no
// credit update for the tail of a half it has not seen filled).
func (e *Engine) sendDrained() bool {
	if e.inflightLen != 0 {
		return false
	}
	if e.cfg.RetainUntilReceived {
		return e.sHead-e.sTail <= uint64(e.sendResize.ring)
	}
	return e.sTail == e.sHead
}

// moveSendRing switches to the added send region; no send is in flight,
// so nothing points into the old one, and the bytes the ring still holds
// (only with RetainUntilReceived) are copied along.
func (e *Engine) moveSendRing() {
	rs := &e.sendResize
	old := e.send
	if rs.grow {
		e.stats.SendRingGrowths++
	} else {
		e.stats.SendRingShrinks++
	}
	oldRing := e.sbuf
	e.send = rs.region
	e.sbuf = rs.region.Buf[:rs.ring]
	if e.sTail != e.sHead {
		copyRing(e.sbuf, oldRing, e.sTail, e.sHead)
	}
	e.sendCtrlOff = rs.ring
	e.sendMsgOff = rs.ring + CtrlSlots*CtrlSlotSize
	*rs = resize{}
	e.retire(old)
}

// recvMoveReady reports that the next buffer grant may come from the added
// receive region: no retired ring is still alive (one at a time), and the
// peer has a target entry free.
func (e *Engine) recvMoveReady() bool {
	return e.recvResize.has && !e.rxOldLive && e.gqLen-e.gqFilled < 2
}

// bufferGrantDue reports that a credit update would carry a buffer grant.
func (e *Engine) bufferGrantDue() bool {
	return e.gqLen-e.gqFilled < 2 && e.rbufAvail >= e.half || e.recvMoveReady()
}

// moveRecvRing makes the added receive region the current ring, whose
// first half the caller grants next. The grants alive stay in the old
// ring, which is retired once they are read.
func (e *Engine) moveRecvRing() {
	rs := &e.recvResize
	if rs.grow {
		e.stats.RecvRingGrowths++
	} else {
		e.stats.RecvRingShrinks++
	}
	for i := 0; i < e.gqLen; i++ {
		e.gq[(e.gqHead+i)%maxGrants].old = true
	}
	old := e.rxReg
	e.rxReg = rs.region
	e.half = uint32(rs.ring / 2)
	e.rbuf = rs.region.Buf[:2*e.half]
	e.rbufAvail = 2 * e.half
	e.rbufFreeOff = 0
	*rs = resize{}
	if e.gqLen == 0 {
		e.retire(old)
		return
	}
	e.rxOld, e.rxOldLive = old, true
}

// releaseOldRing hands back the retired ring once its last grant is read.
func (e *Engine) releaseOldRing() {
	e.retire(e.rxOld)
	e.rxOld, e.rxOldLive = Region{}, false
}
