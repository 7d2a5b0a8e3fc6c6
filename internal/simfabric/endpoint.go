package simfabric

import (
	"sync/atomic"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

type region struct {
	buf         []byte
	addr        uint64
	lkey, rkey  uint32
	remoteWrite bool
}

// wireOp is a posted send work request on its way to the peer. Its payload
// already sits in the peer's inbound FIFO at [payStart, payEnd).
type wireOp struct {
	id         uint64
	op         wr.Opcode
	imm        uint32
	signaled   bool
	remoteAddr uint64
	rkey       uint32
	length     uint32
	payStart   uint64
	payEnd     uint64
	deliverAt  int64
}

// landing is a delivered (or dropped, dst == nil) payload waiting to be
// copied into this endpoint's memory when it next polls.
type landing struct {
	dst        []byte
	start, end uint64
}

type cqEntry struct {
	wc        wr.Completion
	visibleAt int64
	seq       uint64
}

// EndpointStats count one endpoint's traffic.
type EndpointStats struct {
	SendsPosted     uint64
	RecvsPosted     uint64
	Completions     uint64 // returned by PollCQ
	ErrorCompletion uint64
	RNR             uint64 // its messages that failed for lack of a receive at the peer
}

// Endpoint is one side of a simulated RC connection: a queue pair, its
// CQ (its own, or a shared one: see PairOn) and its registered memory. Its
// methods are safe for concurrent use.
type Endpoint struct {
	f        *Fabric
	peer     *Endpoint
	caps     Caps
	qpNum    uint32
	shared   *CQ // the CQ it completes into, nil for its own
	regions  []region
	nextAddr uint64

	dead   bool
	qpErr  bool
	inject wr.WCStatus // failure for the next completion, if not WCSuccess

	wire          queue[wireOp] // outbound, in posting order
	lastDeliverAt int64
	recvQ         queue[wr.Recv]
	landing       queue[landing] // inbound payloads, in delivery order
	inbound       byteFIFO       // their bytes

	// sendCQ and recvCQ are its own CQ. With a shared CQ, recvCQ stays
	// empty and sendCQ holds the send completions not visible yet.
	sendCQ queue[cqEntry]
	recvCQ queue[cqEntry]
	// cqLen counts the entries of sendCQ and recvCQ, so that polling an
	// empty CQ takes no lock: on hardware it is a read of the CQ's next
	// entry, and a spinning poller must not slow the peer down.
	cqLen         atomic.Int64
	lastSendVis   int64
	cqSeq         uint64
	sendsInFlight int // posted sends whose completion has not been polled

	notify chan struct{}
	stats  EndpointStats
}

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

// Register makes buf known to the endpoint's device, as ibv_reg_mr does,
// and returns it as a ring.Region with a fresh address and keys. Only a
// region registered with remoteWrite may be the target of the peer's
// RDMA WRITEs; nothing is ever remotely readable.
func (e *Endpoint) Register(buf []byte, remoteWrite bool) ring.Region {
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	addr := e.nextAddr
	// Keep regions apart so an overrun lands in no region at all.
	e.nextAddr += (uint64(len(buf)) + 8191) &^ 4095
	f.nextKey++
	r := region{
		buf:         buf,
		addr:        addr,
		lkey:        f.nextKey,
		rkey:        f.nextKey | 0x5a000000,
		remoteWrite: remoteWrite,
	}
	e.regions = append(e.regions, r)
	return ring.Region{Buf: buf, Addr: r.addr, LKey: r.lkey, RKey: r.rkey}
}

// Deregister forgets a region Register returned, as ibv_dereg_mr does:
// from then on the peer's RDMA WRITEs into it fail with a remote access
// error, and local work requests that name it fail too. It reports whether
// the region was registered.
func (e *Endpoint) Deregister(r ring.Region) bool {
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range e.regions {
		if e.regions[i].addr == r.Addr && e.regions[i].lkey == r.LKey {
			e.regions = append(e.regions[:i], e.regions[i+1:]...)
			return true
		}
	}
	return false
}

// HasRegion reports whether a region registered at addr is still there.
func (e *Endpoint) HasRegion(addr uint64) bool {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	for i := range e.regions {
		if e.regions[i].addr == addr {
			return true
		}
	}
	return false
}

// Regions returns how many regions are registered.
func (e *Endpoint) Regions() int {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	return len(e.regions)
}

// local finds the bytes of a local SGE; lkey is checked unless inline.
func (e *Endpoint) local(s wr.SGE, inline bool) ([]byte, bool) {
	for i := range e.regions {
		r := &e.regions[i]
		if s.Addr < r.addr || s.Addr-r.addr > uint64(len(r.buf)) ||
			uint64(s.Length) > uint64(len(r.buf))-(s.Addr-r.addr) {
			continue
		}
		if !inline && s.LKey != r.lkey {
			continue
		}
		off := s.Addr - r.addr
		return r.buf[off : off+uint64(s.Length)], true
	}
	return nil, false
}

// remote finds the bytes an incoming RDMA WRITE may touch.
func (e *Endpoint) remote(addr uint64, n uint32, rkey uint32) ([]byte, bool) {
	for i := range e.regions {
		r := &e.regions[i]
		if r.rkey != rkey || !r.remoteWrite || addr < r.addr || addr-r.addr > uint64(len(r.buf)) ||
			uint64(n) > uint64(len(r.buf))-(addr-r.addr) {
			continue
		}
		off := addr - r.addr
		return r.buf[off : off+uint64(n)], true
	}
	return nil, false
}

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

// land copies delivered payloads into memory, in delivery order.
func (e *Endpoint) land() {
	for e.landing.len() > 0 {
		l := e.landing.pop()
		if l.dst != nil {
			e.inbound.read(l.dst, l.start)
		}
		e.inbound.release(l.end)
	}
}

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
