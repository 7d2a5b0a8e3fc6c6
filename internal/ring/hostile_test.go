package ring_test

import (
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/wr"
)

// rawPeer is a hand-driven peer: the test crafts each work request, so it
// can break every rule a correct rsocket keeps.
type rawPeer struct {
	t       *testing.T
	f       *simfabric.Fabric
	ep      *simfabric.Endpoint
	scratch ring.Region // where payloads are sent from
	target  ring.Region // its target SGL, for the engine's credit updates
	rbuf    ring.Region
	theirs  ring.ConnData // the engine's private data
	nextID  uint64
}

const rawHalf = 32 << 10

// newHostile connects an engine (cfg) to a raw peer that advertises 64
// credits and a 64 KiB rbuf.
func newHostile(t *testing.T, cfg ring.Config) (*side, *rawPeer) {
	t.Helper()
	return newHostileFlags(t, cfg, ring.FlagIOMap)
}

// newHostileFlags is newHostile with the raw peer's private data flags.
func newHostileFlags(t *testing.T, cfg ring.Config, flags uint8) (*side, *rawPeer) {
	t.Helper()
	f := simfabric.New(1, simfabric.Options{Auto: true})
	ee, re := f.Pair(capsFor(cfg), simfabric.Caps{})
	s := newSide(t, "engine", ee, cfg)
	p := &rawPeer{
		t:       t,
		f:       f,
		ep:      re,
		scratch: re.Register(make([]byte, 1<<20), false),
		target:  re.Register(make([]byte, 32), true),
		rbuf:    re.Register(make([]byte, 2*rawHalf), true),
	}
	// Plenty of receives so the engine's own messages never RNR.
	recvs := make([]wr.Recv, 512)
	for i := range recvs {
		recvs[i] = wr.Recv{ID: 1<<63 | uint64(i)}
		if cfg.IWARP {
			recvs[i].NumSGE = 1
			recvs[i].SGE = wr.SGE{Addr: p.scratch.Addr + uint64(1<<19+4*i), Length: 4, LKey: p.scratch.LKey}
		}
	}
	if err := re.PostRecv(recvs); err != nil {
		t.Fatal(err)
	}
	mine := ring.ConnData{Version: 1, Flags: flags, Credits: 64,
		TargetSGL: ring.RemoteSGE{Addr: p.target.Addr, Key: p.target.RKey, Length: 2},
		DataBuf:   ring.RemoteSGE{Addr: p.rbuf.Addr, Key: p.rbuf.RKey, Length: rawHalf}}
	pd := mine.Encode()
	if err := s.eng.Establish(pd[:]); err != nil {
		t.Fatal(err)
	}
	theirs := s.eng.LocalConnData()
	var err error
	if p.theirs, err = ring.DecodeConnData(theirs[:]); err != nil {
		t.Fatal(err)
	}
	return s, p
}

// post sends one crafted work request with payload copied from b.
func (p *rawPeer) post(op wr.Opcode, imm uint32, remote uint64, rkey uint32, b []byte) {
	p.t.Helper()
	copy(p.scratch.Buf, b)
	w := wr.Send{ID: p.nextID, Op: op, Imm: imm, Signaled: true, RemoteAddr: remote, RKey: rkey}
	p.nextID++
	if len(b) > 0 {
		w.NumSGE = 1
		w.SGE[0] = wr.SGE{Addr: p.scratch.Addr, Length: uint32(len(b)), LKey: p.scratch.LKey}
	}
	if err := p.ep.PostSend([]wr.Send{w}); err != nil {
		p.t.Fatal(err)
	}
}

// data writes n bytes at offset off of the engine's rbuf with a DATA
// immediate claiming claim bytes.
func (p *rawPeer) data(off uint64, n int, claim uint32) {
	p.post(wr.OpWriteImm, uint32(ring.MakeMsg(ring.MsgData, claim)),
		p.theirs.DataBuf.Addr+off, p.theirs.DataBuf.Key, make([]byte, n))
}

func (p *rawPeer) msg(m ring.Msg) { p.post(wr.OpWriteImm, uint32(m), 0, 0, nil) }

// sgl writes an rs_sge into entry i of the engine's target SGL (in the
// engine's byte order, as the protocol requires) with a credit grant.
func (p *rawPeer) sgl(i int, s ring.RemoteSGE, credits uint32) {
	b := make([]byte, 16)
	binary.NativeEndian.PutUint64(b, s.Addr)
	binary.NativeEndian.PutUint32(b[8:], s.Key)
	binary.NativeEndian.PutUint32(b[12:], s.Length)
	p.post(wr.OpWriteImm, uint32(ring.MakeMsg(ring.MsgSGL, credits)),
		p.theirs.TargetSGL.Addr+uint64(16*i), p.theirs.TargetSGL.Key, b)
}

// half returns half i of the raw peer's rbuf, as the protocol would
// advertise it to the engine.
func (p *rawPeer) half(i int) ring.RemoteSGE {
	return ring.RemoteSGE{Addr: p.rbuf.Addr + uint64(i*rawHalf), Key: p.rbuf.RKey, Length: rawHalf}
}

// expectFailure services the engine until it fails and checks that the
// failure is the given check, reported everywhere it should be.
func expectFailure(t *testing.T, s *side, check error) {
	t.Helper()
	var err error
	for i := 0; i < 10 && err == nil; i++ {
		_, err = s.service(1000)
	}
	if err == nil {
		t.Fatal("engine accepted it")
	}
	if !errors.Is(err, check) {
		t.Fatalf("got %v, want %v", err, check)
	}
	var pe *ring.ProtocolError
	if errors.Is(check, ring.ErrCompletion) {
		var ce *ring.CompletionError
		if !errors.As(err, &ce) {
			t.Fatalf("%v is not a *CompletionError", err)
		}
	} else if !errors.As(err, &pe) || pe.Check != check || !errors.Is(err, ring.ErrProtocol) {
		t.Fatalf("%#v is not a *ProtocolError{Check: %v}", err, check)
	}
	t.Logf("rejected: %v", err)
	// Bytes that passed the checks before the failure are read first.
	for range 1000 {
		n, rerr := s.eng.Read(make([]byte, 64<<10))
		if n > 0 && rerr == nil {
			continue
		}
		if n != 0 || rerr != err {
			t.Fatalf("Read after failure: %d, %v", n, rerr)
		}
		break
	}
	if _, werr := s.eng.Write([]byte("x")); werr != err {
		t.Fatalf("Write after failure: %v", werr)
	}
	if wrs := s.eng.PostSends(nil); len(wrs) != 0 {
		t.Fatalf("engine still sends after failure: %+v", wrs)
	}
	if !s.eng.Finished() || !s.eng.Readable() || !s.eng.Writable() {
		t.Fatal("failure does not wake the driver")
	}
}

func TestHostileConnData(t *testing.T) {
	good := ring.ConnData{Version: 1, Flags: ring.FlagIOMap, Credits: 64,
		TargetSGL: ring.RemoteSGE{Addr: 0x1000, Key: 1, Length: 2},
		DataBuf:   ring.RemoteSGE{Addr: 0x2000, Key: 2, Length: 4096}}
	for _, tc := range []struct {
		name  string
		mod   func(b []byte) []byte
		check error
	}{
		{"short", func(b []byte) []byte { return b[:39] }, ring.ErrShortConnData},
		{"empty", func(b []byte) []byte { return nil }, ring.ErrShortConnData},
		{"version 0", func(b []byte) []byte { b[0] = 0; return b }, ring.ErrVersion},
		{"version 2", func(b []byte) []byte { b[0] = 2; return b }, ring.ErrVersion},
		{"zero credits", func(b []byte) []byte { b[2], b[3] = 0, 0; return b }, ring.ErrBadConnData},
		{"one-entry target SGL", func(b []byte) []byte { b[23] = 1; return b }, ring.ErrBadConnData},
		{"empty data buffer", func(b []byte) []byte { clear(b[36:40]); return b }, ring.ErrBadConnData},
		{"data buffer wraps address space", func(b []byte) []byte {
			binary.BigEndian.PutUint64(b[24:], ^uint64(0)-100)
			return b
		}, ring.ErrBadConnData},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ring.Config{}
			l := cfg.Layout()
			e, err := ring.New(cfg, ring.Region{Buf: make([]byte, l.SendRegion)},
				ring.Region{Buf: make([]byte, l.RecvRegion)}, ring.Region{Buf: make([]byte, l.TargetRegion)})
			if err != nil {
				t.Fatal(err)
			}
			b := good.Encode()
			err = e.Establish(tc.mod(b[:]))
			if !errors.Is(err, tc.check) || !errors.Is(err, ring.ErrProtocol) {
				t.Fatalf("got %v want %v", err, tc.check)
			}
			if wrs := e.PostSends(nil); len(wrs) != 0 {
				t.Fatal("sends without a peer")
			}
		})
	}
}

func TestHostileDataBeyondGrant(t *testing.T) {
	s, p := newHostile(t, ring.Config{RecvBufferSize: 8192})
	p.data(0, 4097, 4097) // the granted first half is 4096 bytes
	expectFailure(t, s, ring.ErrDataOverrun)
}

// TestHostileDataStraddlesGrant: both halves are granted, 8 KiB in total,
// but a transfer may not cross from one advertised half into the next.
func TestHostileDataStraddlesGrant(t *testing.T) {
	s, p := newHostile(t, ring.Config{RecvBufferSize: 8192})
	if _, err := s.service(100); err != nil { // the engine grants its second half
		t.Fatal(err)
	}
	p.data(0, 4000, 4000)
	p.data(4000, 200, 200)
	expectFailure(t, s, ring.ErrDataOverrun)
}

// TestHostileDataBeforeRegrant: the peer fills both halves, the reader
// frees nothing, and the peer writes on as if half 0 were granted again.
func TestHostileDataBeforeRegrant(t *testing.T) {
	s, p := newHostile(t, ring.Config{RecvBufferSize: 8192})
	if _, err := s.service(100); err != nil {
		t.Fatal(err)
	}
	p.data(0, 4096, 4096)
	p.data(4096, 4096, 4096)
	p.data(0, 1, 1)
	expectFailure(t, s, ring.ErrDataOverrun)
}

func TestHostileTooManyMessages(t *testing.T) {
	s, p := newHostile(t, ring.Config{RecvQueueSize: 16})
	for i := 0; i < 16; i++ {
		p.data(uint64(i), 1, 1)
	}
	if _, err := s.service(1000); err != nil {
		t.Fatalf("16 messages within 16 credits: %v", err)
	}
	p.data(16, 1, 1) // nothing was read: no new credits
	expectFailure(t, s, ring.ErrCreditOverrun)
}

func TestHostileReservedOpcodes(t *testing.T) {
	for _, op := range []ring.MsgOp{ring.MsgRsvdDataMore, ring.MsgWrite, ring.MsgRsvdDRAMore, ring.MsgRsvd} {
		t.Run(op.String(), func(t *testing.T) {
			s, p := newHostile(t, ring.Config{})
			p.msg(ring.MakeMsg(op, 10))
			expectFailure(t, s, ring.ErrReservedOpcode)
		})
	}
}

func TestHostileUnknownControl(t *testing.T) {
	s, p := newHostile(t, ring.Config{})
	p.msg(ring.MakeMsg(ring.MsgCtrl, 3))
	expectFailure(t, s, ring.ErrBadControl)
}

func TestHostileIOMap(t *testing.T) {
	s, p := newHostile(t, ring.Config{})
	p.msg(ring.MakeMsg(ring.MsgIOMapSGL, 0))
	expectFailure(t, s, ring.ErrUnexpectedIOMap)
}

// On RoCE a receiver may grant any memory it likes (an rnet receiver
// moves its ring), so only a length no receiver can mean is refused.
func TestHostileSGLBadLength(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length uint32
		addr   uint64
	}{
		{"zero", 0, 0x1000},
		{"huge", ring.MaxBufSize + 1, 0x1000},
		{"max uint32", 1<<32 - 1, 0x1000},
		{"address wraps", 4096, 1<<64 - 2048},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, p := newHostile(t, ring.Config{})
			bad := p.half(1)
			bad.Length, bad.Addr = tc.length, tc.addr
			// On RoCE the update and its credit message are one write:
			// once the message completes the update has landed, so it
			// is judged at once.
			p.sgl(1, bad, 64)
			expectFailure(t, s, ring.ErrBadSGL)
		})
	}
}

// A credit message that carries a byte count other than 0 or one rs_sge
// cannot be an SGL update.
func TestHostileSGLWrongSize(t *testing.T) {
	s, p := newHostile(t, ring.Config{})
	p.post(wr.OpWriteImm, uint32(ring.MakeMsg(ring.MsgSGL, 64)), p.theirs.TargetSGL.Addr, p.theirs.TargetSGL.Key, make([]byte, 8))
	expectFailure(t, s, ring.ErrBadSGL)
}

// A grant of any region, any key and any sane length is taken on RoCE, and
// the engine's next transfer goes exactly there, capped at its length.
func TestSGLAnyGrantTaken(t *testing.T) {
	s, p := newHostile(t, ring.Config{})
	grant := ring.RemoteSGE{Addr: 0x7777000, Key: 0x4242, Length: 3000}
	p.sgl(1, grant, 64)
	for i := 0; i < 8; i++ {
		if _, err := s.service(64); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.eng.Stats().BufferGrantsReceived; got != 1 {
		t.Fatalf("grants taken: %d, want 1", got)
	}
	if err := s.eng.Err(); err != nil {
		t.Fatalf("engine failed on a sane grant: %v", err)
	}
}

// TestHostileSGLWhileInUse: entry 0 still holds the unused first half.
// TestHostileSGLTornRead: the next update may be landing in the mailbox
// while the engine processes an older credit message (a C peer does this
// when the engine polls a batch late). Whatever the entry reads then, it is
// judged only when its own message completes.
func TestHostileSGLTornRead(t *testing.T) {
	s, p := newHostile(t, ring.Config{})
	torn := p.half(1)
	torn.Addr &^= 0xffffffff // the low word not yet written
	b := make([]byte, 16)
	binary.NativeEndian.PutUint64(b, torn.Addr)
	binary.NativeEndian.PutUint32(b[8:], torn.Key)
	binary.NativeEndian.PutUint32(b[12:], torn.Length)
	p.post(wr.OpWrite, 0, p.theirs.TargetSGL.Addr+16, p.theirs.TargetSGL.Key, b) // no message yet
	p.msg(ring.MakeMsg(ring.MsgSGL, 64))                                         // an older credit message
	if _, err := s.service(100); err != nil {
		t.Fatalf("a torn entry was judged before its message: %v", err)
	}
	p.sgl(1, p.half(1), 64)
	if _, err := s.service(100); err != nil {
		t.Fatal(err)
	}
	if st := s.eng.Stats(); st.BufferGrantsReceived != 1 {
		t.Fatalf("%+v", st)
	}
}

func TestHostileSGLWhileInUse(t *testing.T) {
	s, p := newHostile(t, ring.Config{})
	p.sgl(1, p.half(1), 64) // fine
	p.sgl(0, p.half(0), 64) // but the engine has not written a byte of half 0
	expectFailure(t, s, ring.ErrUnexpectedSGL)
}

// TestHostileSGLTwice: entry 1 is advertised again before it was used.
func TestHostileSGLTwice(t *testing.T) {
	s, p := newHostile(t, ring.Config{})
	p.sgl(1, p.half(1), 64)
	if _, err := s.service(100); err != nil {
		t.Fatal(err)
	}
	p.sgl(1, p.half(1), 64)
	expectFailure(t, s, ring.ErrUnexpectedSGL)
}

func TestHostileCredits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		credits uint32
	}{
		{"more than the window", 65},
		{"taken back", 63},
		{"far behind", 0x8000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, p := newHostile(t, ring.Config{})
			p.msg(ring.MakeMsg(ring.MsgSGL, tc.credits))
			expectFailure(t, s, ring.ErrBadCredits)
		})
	}
}

func TestHostileDataAfterShutdown(t *testing.T) {
	s, p := newHostile(t, ring.Config{})
	p.msg(ring.MakeMsg(ring.MsgCtrl, ring.CtrlShutdown))
	p.data(0, 5, 5)
	expectFailure(t, s, ring.ErrDataAfterShutdown)
}

// TestHostileDataAfterDisconnect: DISCONNECT promised no more data.
func TestHostileDataAfterDisconnect(t *testing.T) {
	s, p := newHostile(t, ring.Config{})
	p.msg(ring.MakeMsg(ring.MsgCtrl, ring.CtrlDisconnect))
	p.data(0, 5, 5)
	expectFailure(t, s, ring.ErrDataAfterDisconnect)
}

func TestHostileSendInsteadOfImmediate(t *testing.T) {
	s, p := newHostile(t, ring.Config{})
	p.post(wr.OpSend, 0, 0, 0, nil) // a 0-byte SEND fits a receive without buffers
	expectFailure(t, s, ring.ErrBadMessage)
}

func TestHostileIWARPShortMessage(t *testing.T) {
	s, p := newHostile(t, ring.Config{IWARP: true})
	p.post(wr.OpSend, 0, 0, 0, []byte{1, 2, 3})
	expectFailure(t, s, ring.ErrBadMessage)
}

func TestHostileIWARPReservedOpcode(t *testing.T) {
	s, p := newHostile(t, ring.Config{IWARP: true})
	b := binary.NativeEndian.AppendUint32(nil, uint32(ring.MakeMsg(ring.MsgRsvd, 0)))
	p.post(wr.OpSend, 0, 0, 0, b)
	expectFailure(t, s, ring.ErrReservedOpcode)
}

func TestCompletionErrorInjected(t *testing.T) {
	for _, status := range []wr.WCStatus{wr.WCRemAccessErr, wr.WCGeneralErr} {
		t.Run(status.String(), func(t *testing.T) {
			s, p := newHostile(t, ring.Config{})
			s.ep.InjectError(status)
			p.data(0, 5, 5) // its receive completion fails
			expectFailure(t, s, ring.ErrCompletion)
			var ce *ring.CompletionError
			errors.As(s.eng.Err(), &ce)
			if ce.Status != status || !ce.Recv {
				t.Fatalf("%+v", ce)
			}
			// A refused transfer is the peer's side; a general error is not.
			if got, want := errors.Is(s.eng.Err(), ring.ErrPeerGone), status == wr.WCRemAccessErr; got != want {
				t.Fatalf("errors.Is(%v, ErrPeerGone) = %v", s.eng.Err(), got)
			}
		})
	}
}

// TestCompletionErrorCauseBeforeFlush: a QP's failed transfer moves it to
// the error state, which flushes the other queue; the flush can be polled
// first, but the error that ends the connection names the cause.
func TestCompletionErrorCauseBeforeFlush(t *testing.T) {
	for _, flushFirst := range []bool{true, false} {
		s, _ := newHostile(t, ring.Config{})
		if _, err := s.eng.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		sends := s.eng.PostSends(nil)
		if len(sends) == 0 {
			t.Fatal("Write posted nothing")
		}
		flush := wr.Completion{ID: 1 << 63, Status: wr.WCWRFlushErr} // the first receive
		cause := wr.Completion{ID: sends[0].ID, Status: wr.WCRemAccessErr}
		wcs := []wr.Completion{cause, flush}
		if flushFirst {
			wcs = []wr.Completion{flush, cause}
		}
		err := s.eng.Complete(wcs)
		var ce *ring.CompletionError
		if !errors.As(err, &ce) || ce.Status != wr.WCRemAccessErr || ce.Recv {
			t.Fatalf("flush first %v: %v, want the send's remote access error", flushFirst, err)
		}
		if !errors.Is(err, ring.ErrPeerGone) {
			t.Fatalf("flush first %v: %v does not match ErrPeerGone", flushFirst, err)
		}
	}
}

// TestCompletionErrorDeadPeer: a keepalive to a vanished peer fails.
func TestCompletionErrorDeadPeer(t *testing.T) {
	s, p := newHostile(t, ring.Config{})
	if _, err := s.service(100); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if _, err := s.service(100); err != nil {
			t.Fatal(err)
		}
	}
	p.f.Kill(p.ep)
	s.eng.Keepalive()
	expectFailure(t, s, ring.ErrCompletion)
	var ce *ring.CompletionError
	errors.As(s.eng.Err(), &ce)
	if ce.Status != wr.WCRetryExcErr || ce.Recv {
		t.Fatalf("%+v", ce)
	}
	if !errors.Is(s.eng.Err(), ring.ErrPeerGone) {
		t.Fatalf("%v does not match ErrPeerGone", s.eng.Err())
	}
}

// TestPeerDisconnectIsNotAnError: after the peer's DISCONNECT, data already
// received is still read, then io.EOF; writes fail with
// ErrPeerDisconnected, and the flushes of teardown are not errors.
func TestPeerDisconnectIsNotAnError(t *testing.T) {
	s, p := newHostile(t, ring.Config{})
	p.data(0, 5, 5)
	p.msg(ring.MakeMsg(ring.MsgCtrl, ring.CtrlDisconnect))
	if _, err := s.service(100); err != nil {
		t.Fatal(err)
	}
	if n, err := s.eng.Read(make([]byte, 10)); n != 5 || err != nil {
		t.Fatal(n, err)
	}
	if _, err := s.eng.Read(make([]byte, 10)); err != io.EOF {
		t.Fatal(err)
	}
	if _, err := s.eng.Write([]byte("x")); !errors.Is(err, ring.ErrPeerDisconnected) {
		t.Fatal(err)
	}
	s.ep.Disconnect()
	if _, err := s.service(1000); err != nil {
		t.Fatalf("teardown flush reported: %v", err)
	}
	if !s.eng.Finished() || !s.eng.Flushed() {
		t.Fatal("not finished")
	}
}

// TestHostileDataLengthLies: the immediate claims more bytes than the RDMA
// WRITE carried, which would hand the reader stale bytes of the ring.
func TestHostileDataLengthLies(t *testing.T) {
	s, p := newHostile(t, ring.Config{})
	p.data(0, 5, 10)
	expectFailure(t, s, ring.ErrBadMessage)
}

// TestHostileDataAfterBothShut: the peer's DATA after its own SHUTDOWN is an
// error also once our SHUTDOWN has completed, when the exchange is over.
func TestHostileDataAfterBothShut(t *testing.T) {
	s, p := newHostile(t, ring.Config{})
	s.eng.CloseWrite()
	for range 10 {
		if _, err := s.service(100); err != nil {
			t.Fatal(err)
		}
	}
	p.msg(ring.MakeMsg(ring.MsgCtrl, ring.CtrlShutdown))
	if _, err := s.service(100); err != nil {
		t.Fatal(err)
	}
	if !s.eng.Finished() {
		t.Fatal("SHUTDOWN both ways did not finish the exchange")
	}
	p.data(0, 5, 5)
	expectFailure(t, s, ring.ErrDataAfterShutdown)
}

// TestFailureAfterDataKeepsData: bytes that passed every check before the
// peer broke the protocol are still read, as TCP reads what came before a
// reset; then every Read reports the failure.
func TestFailureAfterDataKeepsData(t *testing.T) {
	s, p := newHostile(t, ring.Config{})
	p.data(0, 5, 5)
	p.msg(ring.MakeMsg(ring.MsgCtrl, 3)) // an unknown control code
	var err error
	for i := 0; i < 10 && err == nil; i++ {
		_, err = s.service(100)
	}
	if !errors.Is(err, ring.ErrBadControl) {
		t.Fatalf("engine error %v, want ErrBadControl", err)
	}
	if !s.eng.Readable() {
		t.Fatal("a failed engine with data is not readable")
	}
	b := make([]byte, 3)
	if n, rerr := s.eng.Read(b); n != 3 || rerr != nil {
		t.Fatalf("first Read after the failure = %d, %v; want the data", n, rerr)
	}
	if n, rerr := s.eng.Read(b); n != 2 || rerr != nil {
		t.Fatalf("second Read after the failure = %d, %v; want the rest", n, rerr)
	}
	if n, rerr := s.eng.Read(b); n != 0 || rerr != err {
		t.Fatalf("Read after the data = %d, %v; want %v", n, rerr, err)
	}
}
