package ring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/rnet-dev/rnet/internal/wr"
)

func FuzzDecodeConnData(f *testing.F) {
	for _, tc := range connDataGolden {
		b := tc.cd.Encode()
		f.Add(b[:])
	}
	f.Add([]byte{1})
	f.Add(make([]byte, 56))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeConnData(b)
		if err != nil {
			var pe *ProtocolError
			if !errors.As(err, &pe) || !errors.Is(err, ErrProtocol) {
				t.Fatalf("untyped error %v", err)
			}
			if len(b) >= ConnDataSize && b[0] == ConnDataVersion {
				t.Fatalf("rejected valid-looking data: %v", err)
			}
			return
		}
		// Everything but the reserved bytes (5 and 6) survives a round trip.
		enc := c.Encode()
		want := append([]byte{}, b[:ConnDataSize]...)
		clear(want[5:7])
		if !bytes.Equal(enc[:], want) {
			t.Fatalf("round trip:\n got %x\nwant %x", enc, want)
		}
		// An engine must judge any decodable data without panicking.
		e := newTestEngine(t, Config{SendBufferSize: 4096, RecvBufferSize: 4096, SendQueueSize: 16, RecvQueueSize: 16})
		if err := e.Establish(b); err != nil {
			if !errors.Is(err, ErrBadConnData) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		e.PostRecvs(nil)
		e.Write(make([]byte, 100))
		e.PostSends(nil)
		if err := e.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzParseMsg(f *testing.F) {
	for _, tc := range immGolden {
		f.Add(uint32(MakeMsg(tc.op, tc.data)))
	}
	f.Add(uint32(0x20000000))
	f.Add(uint32(0xffffffff))
	f.Fuzz(func(t *testing.T, imm uint32) {
		m, err := ParseMsg(imm)
		if uint32(m) != imm || MakeMsg(m.Op(), m.Data()) != m {
			t.Fatalf("%#x decodes to %v", imm, m)
		}
		switch op := m.Op(); {
		case op == MsgRsvdDataMore || op == MsgWrite || op == MsgRsvdDRAMore || op == MsgRsvd:
			if !errors.Is(err, ErrReservedOpcode) {
				t.Fatalf("%v accepted: %v", m, err)
			}
		case op == MsgCtrl && m.Data() > CtrlShutdown:
			if !errors.Is(err, ErrBadControl) {
				t.Fatalf("%v accepted: %v", m, err)
			}
		default:
			if err != nil {
				t.Fatalf("%v rejected: %v", m, err)
			}
		}
	})
}

// FuzzEngine feeds an engine an arbitrary sequence of peer actions
// (messages with any immediate, writes into its target SGL and rbuf,
// bogus completions) interleaved with application reads, writes and
// closes. The engine may fail the connection, but must never panic, read
// outside its regions, or break its accounting while it is up.
func FuzzEngine(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0x10, 2, 0x40, 3, 0x20})
	f.Add([]byte{0x80, 0x80, 0, 0x01, 0x80, 5, 0, 0, 0, 0x10, 0x30, 0x50})
	f.Add([]byte{1, 0x61, 0, 0, 0x10, 0x00, 0x70, 0x80, 0, 0, 0x20})
	// A landed SGL update (RoCE) after the right entry was written.
	f.Add([]byte{0, 0x30, 0x01, 0x81, 0x70, 0x40, 0x90, 0x00, 0x10, 0x01, 0x81})
	f.Fuzz(func(t *testing.T, prog []byte) {
		fz := newFuzzEngine(t, prog)
		for fz.more() {
			fz.step()
			if fz.e.Err() == nil {
				if err := fz.e.CheckInvariants(); err != nil {
					t.Fatalf("after %d bytes of program: %v", fz.pc, err)
				}
			}
		}
	})
}

type fuzzEngine struct {
	t     *testing.T
	e     *Engine
	prog  []byte
	pc    int
	sends []wr.Send
	recvs []wr.Recv
	buf   []byte
}

func newFuzzEngine(t *testing.T, prog []byte) *fuzzEngine {
	fz := &fuzzEngine{t: t, prog: prog, buf: make([]byte, 1<<16)}
	flags := fz.byte()
	cfg := Config{SendBufferSize: 512, RecvBufferSize: 256, SendQueueSize: 16, RecvQueueSize: 16,
		InlineThreshold: int(flags>>4) * 8, IWARP: flags&1 != 0}
	if cfg.InlineThreshold == 0 {
		cfg.InlineThreshold = NoInline
	}
	fz.e = newTestEngine(t, cfg)
	peer := ConnData{Version: 1, Flags: FlagIOMap | flags&FlagNet, Credits: 16,
		TargetSGL: RemoteSGE{Addr: 0xa00000, Key: 0xaa, Length: 2},
		DataBuf:   RemoteSGE{Addr: 0xb00000, Key: 0xbb, Length: 128}}
	pd := peer.Encode()
	if err := fz.e.Establish(pd[:]); err != nil {
		t.Fatal(err)
	}
	fz.recvs = fz.e.PostRecvs(nil)
	return fz
}

func (fz *fuzzEngine) more() bool { return fz.pc < len(fz.prog) }

func (fz *fuzzEngine) byte() byte {
	if fz.pc >= len(fz.prog) {
		return 0
	}
	b := fz.prog[fz.pc]
	fz.pc++
	return b
}

func (fz *fuzzEngine) u32() uint32 {
	return uint32(fz.byte())<<24 | uint32(fz.byte())<<16 | uint32(fz.byte())<<8 | uint32(fz.byte())
}

func (fz *fuzzEngine) step() {
	e := fz.e
	op := fz.byte()
	switch op >> 4 {
	case 0, 1, 2: // a message from the peer, usually well-formed DATA or SGL
		var m uint32
		landed := false // on RoCE, an SGL update came in the same write
		switch op & 3 {
		case 0:
			m = uint32(MakeMsg(MsgData, uint32(fz.byte())))
		case 1:
			b := fz.byte()
			m = uint32(MakeMsg(MsgSGL, uint32(e.sseqNo)+uint32(b&0x7f%17)))
			landed = b&0x80 != 0
		default:
			m = fz.u32()
		}
		fz.deliver(m, op&4 != 0, op&8 != 0, landed)
	case 3: // the peer writes a target SGL entry: often the right one
		i := int(op & 1)
		s := RemoteSGE{Addr: 0xb00000, Key: 0xbb, Length: 128}
		if i == 1 {
			s.Addr += 128
		}
		if op&2 != 0 {
			s = RemoteSGE{Addr: uint64(fz.u32()), Key: fz.u32(), Length: fz.u32()}
		}
		putRemoteSGE(e.target.Buf[i*16:], s, binary.NativeEndian)
	case 4: // the peer scribbles on rbuf
		off := int(fz.byte()) % len(e.rbuf)
		e.rbuf[off] = fz.byte()
	case 5, 6: // application read
		n, err := e.Read(fz.buf[:int(fz.byte())])
		if n < 0 || (err != nil && n != 0) {
			fz.t.Fatalf("Read = %d, %v", n, err)
		}
	case 7, 8: // application write
		n, _ := e.Write(fz.buf[:int(fz.byte())*4])
		if n < 0 || n > 1024 {
			fz.t.Fatalf("Write = %d", n)
		}
	case 9, 10: // driver: post, then complete some sends in order
		fz.recvs = e.PostRecvs(fz.recvs)
		fz.sends = e.PostSends(fz.sends)
		k := min(int(op&7), len(fz.sends))
		for _, w := range fz.sends[:k] {
			e.Complete([]wr.Completion{{ID: w.ID, Opcode: wr.WCRDMAWrite}})
		}
		fz.sends = fz.sends[k:]
	case 11: // a send completion with an error or an unknown ID
		e.Complete([]wr.Completion{{ID: uint64(fz.byte()), Status: wr.WCStatus(op & 7)}})
	case 12:
		e.Keepalive()
	case 13:
		e.CloseWrite()
	case 14:
		e.Close()
	case 15:
		e.Abort()
	}
}

// deliver completes the oldest posted receive with message word m (in an
// immediate, or in iWARP mode in the receive's slot). bad bends the
// completion: a wrong opcode or length.
func (fz *fuzzEngine) deliver(m uint32, bad, fail, landed bool) {
	e := fz.e
	if len(fz.recvs) == 0 {
		return
	}
	r := fz.recvs[0]
	fz.recvs = fz.recvs[1:]
	wc := wr.Completion{ID: r.ID, Opcode: wr.WCRecvRDMAWithImm, Imm: m}
	if Msg(m).Op() == MsgData {
		wc.ByteLen = Msg(m).Data() // the write carries what the immediate says
	}
	if landed {
		wc.ByteLen = RemoteSGESize // an rs_sge written into our target SGL
	}
	if e.cfg.IWARP {
		off := r.SGE.Addr - e.recv.Addr
		binary.NativeEndian.PutUint32(e.recv.Buf[off:], m)
		wc = wr.Completion{ID: r.ID, Opcode: wr.WCRecv, ByteLen: 4}
	}
	if bad {
		wc.Opcode ^= 1
		wc.ByteLen++
	}
	if fail {
		wc.Status = wr.WCRemOpErr
	}
	e.Complete([]wr.Completion{wc})
}
