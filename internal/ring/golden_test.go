package ring

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/rnet-dev/rnet/internal/wr"
)

// unhex decodes hex written with spaces for readability.
func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The expected bytes below were written by hand from the rs_conn_data
// table in rsocket-protocol.md, not produced by the encoder.
var connDataGolden = []struct {
	name string
	cd   ConnData
	hex  string
}{
	{
		name: "little-endian sender, defaults",
		cd: ConnData{
			Version: 1, Flags: FlagIOMap, Credits: 384,
			TargetSGL: RemoteSGE{Addr: 0x00007f1234567000, Key: 0x11223344, Length: 2},
			DataBuf:   RemoteSGE{Addr: 0x00007f1234500000, Key: 0xaabbccdd, Length: 0x10000},
		},
		hex: "01 02 0180 000000 00" +
			" 00007f1234567000 11223344 00000002" +
			" 00007f1234500000 aabbccdd 00010000",
	},
	{
		name: "big-endian sender, iomap 256 entries, 1 MiB rbuf",
		cd: ConnData{
			Version: 1, Flags: FlagIOMap | FlagNet, Credits: 0xfffe, TargetIOMapSize: 0x81,
			TargetSGL: RemoteSGE{Addr: 0x0102030405060708, Key: 0x01, Length: 2},
			DataBuf:   RemoteSGE{Addr: 0xfffffffffff00000, Key: 0xdeadbeef, Length: 0x80000},
		},
		hex: "01 03 fffe 000000 81" +
			" 0102030405060708 00000001 00000002" +
			" fffffffffff00000 deadbeef 00080000",
	},
	{
		name: "rnet sender whose port takes 1024-byte packets",
		cd: ConnData{
			Version: 1, Flags: FlagIOMap | FlagRecvHeadroom | FlagGrowingCredits, Credits: 64, PortMTU: 3,
			TargetSGL: RemoteSGE{Addr: 0x00007f1234567000, Key: 0x11223344, Length: 2},
			DataBuf:   RemoteSGE{Addr: 0x00007f1234500000, Key: 0xaabbccdd, Length: 0x10000},
		},
		hex: "01 c2 0040 030000 00" +
			" 00007f1234567000 11223344 00000002" +
			" 00007f1234500000 aabbccdd 00010000",
	},
}

func TestConnDataGolden(t *testing.T) {
	for _, tc := range connDataGolden {
		t.Run(tc.name, func(t *testing.T) {
			want := unhex(t, tc.hex)
			if len(want) != ConnDataSize {
				t.Fatalf("golden has %d bytes", len(want))
			}
			got := tc.cd.Encode()
			if string(got[:]) != string(want) {
				t.Fatalf("encode:\n got %x\nwant %x", got, want)
			}
			dec, err := DecodeConnData(want)
			if err != nil {
				t.Fatal(err)
			}
			if dec != tc.cd {
				t.Fatalf("decode: got %+v want %+v", dec, tc.cd)
			}
			// CM private data arrives padded (56 bytes on IB): still fine.
			padded := append(append([]byte{}, want...), make([]byte, 16)...)
			if dec, err := DecodeConnData(padded); err != nil || dec != tc.cd {
				t.Fatalf("padded decode: %+v, %v", dec, err)
			}
		})
	}
}

func TestConnDataRejects(t *testing.T) {
	good := unhex(t, connDataGolden[0].hex)
	for n := 0; n < ConnDataSize; n++ {
		_, err := DecodeConnData(good[:n])
		if !errors.Is(err, ErrShortConnData) || !errors.Is(err, ErrProtocol) {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
	for _, v := range []byte{0, 2, 0xff} {
		b := append([]byte{}, good...)
		b[0] = v
		_, err := DecodeConnData(b)
		var pe *ProtocolError
		if !errors.As(err, &pe) || pe.Check != ErrVersion {
			t.Fatalf("version %d: %v", v, err)
		}
	}
}

func TestIOMapScale(t *testing.T) {
	for _, tc := range []struct {
		v int
		s uint8
	}{{0, 0}, {1, 1}, {128, 0x80}, {256, 0x81}, {512, 0x82}, {0x7f00, 0xff}} {
		if s := IOMapValueToScale(tc.v); s != tc.s {
			t.Errorf("scale(%d) = %#x want %#x", tc.v, s, tc.s)
		}
		if v := IOMapScaleToValue(tc.s); v != tc.v {
			t.Errorf("value(%#x) = %d want %d", tc.s, v, tc.v)
		}
	}
}

// Immediates as they appear on the wire (big-endian), from the opcode table
// in rsocket-protocol.md: bits 31..29 opcode, 28..0 data.
var immGolden = []struct {
	op   MsgOp
	data uint32
	wire string
}{
	{MsgData, 1, "00000001"},
	{MsgData, 2048, "00000800"},
	{MsgData, 65536, "00010000"},
	{MsgData, MaxMsgData, "1fffffff"},
	{MsgSGL, 384, "80000180"},
	{MsgSGL, 0xffff + 384, "8001017f"}, // rseq_no + rq_size is not masked to 16 bits
	{MsgIOMapSGL, 5, "c0000005"},
	{MsgCtrl, CtrlDisconnect, "e0000000"},
	{MsgCtrl, CtrlKeepalive, "e0000001"},
	{MsgCtrl, CtrlShutdown, "e0000002"},
}

func TestImmGolden(t *testing.T) {
	for _, tc := range immGolden {
		m := MakeMsg(tc.op, tc.data)
		var wire [4]byte
		binary.BigEndian.PutUint32(wire[:], uint32(m)) // what the driver's htonl produces
		if got := hex.EncodeToString(wire[:]); got != tc.wire {
			t.Errorf("%v: wire %s want %s", m, got, tc.wire)
		}
		back, err := ParseMsg(binary.BigEndian.Uint32(unhex(t, tc.wire)))
		if err != nil || back.Op() != tc.op || back.Data() != tc.data {
			t.Errorf("parse %s: %v %v", tc.wire, back, err)
		}
	}
}

func TestImmRejects(t *testing.T) {
	for _, tc := range []struct {
		wire  string
		check error
	}{
		{"20000000", ErrReservedOpcode}, // RSVD_DATA_MORE
		{"40000010", ErrReservedOpcode}, // WRITE is never on the wire
		{"60000000", ErrReservedOpcode}, // RSVD_DRA_MORE
		{"a0000000", ErrReservedOpcode}, // RSVD
		{"e0000003", ErrBadControl},
		{"ffffffff", ErrBadControl},
	} {
		_, err := ParseMsg(binary.BigEndian.Uint32(unhex(t, tc.wire)))
		if !errors.Is(err, tc.check) || !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v", tc.wire, err)
		}
	}
}

// newTestEngine builds an engine over plain memory with fixed addresses.
func newTestEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	if cfg.IdleBufferSize == 0 {
		cfg.IdleBufferSize = MaxBufSize // the goldens are for fixed rings
	}
	l := cfg.Layout()
	e, err := New(cfg,
		Region{Buf: make([]byte, l.SendRegion), Addr: 0x10000, LKey: 1},
		Region{Buf: make([]byte, l.RecvRegion), Addr: 0x200000, LKey: 2, RKey: 0x22},
		Region{Buf: make([]byte, l.TargetRegion), Addr: 0x3000, LKey: 3, RKey: 0x33})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestLocalConnDataGolden(t *testing.T) {
	if hostBigEndian {
		t.Skip("golden written for a little-endian host")
	}
	e := newTestEngine(t, Config{})
	got := e.LocalConnData()
	want := unhex(t, "01 42 0180 000000 00"+ // FlagIOMap | FlagRecvHeadroom
		" 0000000000003000 00000033 00000002"+
		" 0000000000200000 00000022 00010000")
	if string(got[:]) != string(want) {
		t.Fatalf("got  %x\nwant %x", got, want)
	}
}

// TestCreditUpdateGolden checks the first SGL update byte for byte: it
// advertises the second half of rbuf into entry 1 of the peer's target SGL,
// encoded in the peer's byte order.
func TestCreditUpdateGolden(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flags   string
		payload string
	}{
		{"little-endian peer", "02", "0000210000000000 22000000 00000100"}, // rbuf + 64 KiB,
		{"big-endian peer", "03", "0000000000210000 00000022 00010000"},    // rbuf + 64 KiB
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, Config{})
			peer := unhex(t, "01 "+tc.flags+" 0010 000000 00"+
				" 0000000000a00000 000000aa 00000002"+
				" 0000000000b00000 000000bb 00000800")
			if err := e.Establish(peer); err != nil {
				t.Fatal(err)
			}
			e.PostRecvs(nil)
			wrs := e.PostSends(nil)
			if len(wrs) != 1 {
				t.Fatalf("%d work requests: %+v", len(wrs), wrs)
			}
			w := wrs[0]
			if w.Op != wr.OpWriteImm || w.Imm != 0x80000180 || !w.Inline || !w.Signaled || w.NumSGE != 1 ||
				w.RemoteAddr != 0xa00000+16 || w.RKey != 0xaa || w.SGE[0].Length != 16 || w.SGE[0].LKey != 1 {
				t.Fatalf("work request %+v", w)
			}
			off := w.SGE[0].Addr - 0x10000
			got := e.send.Buf[off : off+16]
			if want := unhex(t, tc.payload); string(got) != string(want) {
				t.Fatalf("payload %x want %x", got, want)
			}
		})
	}
}

// dataOnlyEngine is an established engine with a sendBuf-byte sbuf whose
// peer granted its first dataBuf bytes at 0xb00000 (rkey 0xbb), with nothing
// but data to post: no credit update is due.
func dataOnlyEngine(t *testing.T, sendBuf int, dataBuf uint32) *Engine {
	t.Helper()
	e := newTestEngine(t, Config{SendBufferSize: sendBuf})
	peer := ConnData{Version: 1, Flags: FlagIOMap, Credits: 16,
		TargetSGL: RemoteSGE{Addr: 0xa00000, Key: 0xaa, Length: 2},
		DataBuf:   RemoteSGE{Addr: 0xb00000, Key: 0xbb, Length: dataBuf}}
	pd := peer.Encode()
	if err := e.Establish(pd[:]); err != nil {
		t.Fatal(err)
	}
	e.recvToPost = 0
	e.rbufAvail = 0
	return e
}

func TestDataWorkRequest(t *testing.T) {
	e := dataOnlyEngine(t, 4096, 1<<20)
	if n, err := e.Write([]byte("hello")); n != 5 || err != nil {
		t.Fatal(n, err)
	}
	wrs := e.PostSends(nil)
	want := wr.Send{ID: 0, Op: wr.OpWriteImm, Imm: 5, Inline: true, Signaled: true, NumSGE: 1,
		SGE: [2]wr.SGE{{Addr: 0x10000, Length: 5, LKey: 1}}, RemoteAddr: 0xb00000, RKey: 0xbb}
	if len(wrs) != 1 || wrs[0] != want {
		t.Fatalf("got %+v\nwant %+v", wrs, want)
	}
	// Fill sbuf so the next transfer wraps, with two SGEs. No Read came
	// between the Writes, so it is no turn of the conversation and goes
	// out whole (see sStart).
	if err := e.Complete([]wr.Completion{{ID: 0, Opcode: wr.WCRDMAWrite}}); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.Write(make([]byte, 4096)); n != 4096 {
		t.Fatal(n)
	}
	wrs = e.PostSends(wrs[:0])
	if len(wrs) != 1 || wrs[0].Len() != 4096 {
		t.Fatalf("%+v", wrs)
	}
	if wrs[0].NumSGE != 2 || wrs[0].SGE[0].Addr != 0x10000+5 || wrs[0].SGE[0].Length != 4096-5 ||
		wrs[0].SGE[1].Addr != 0x10000 || wrs[0].SGE[1].Length != 5 || wrs[0].Inline {
		t.Fatalf("wrapped transfer %+v", wrs[0])
	}
	if wrs[0].RemoteAddr != 0xb00000+5 {
		t.Fatalf("remote address %#x", wrs[0].RemoteAddr)
	}
}

// Drivers normalise a Config, adjust it to the device and hand it to New,
// which normalises again: that must change nothing.
func TestNormalizeIdempotent(t *testing.T) {
	for _, c := range []Config{
		{}, {InlineThreshold: NoInline}, {InlineThreshold: 1}, {InlineThreshold: 1 << 20},
		{IWARP: true, InlineThreshold: NoInline}, {SendBufferSize: 1, RecvBufferSize: 3, SendQueueSize: 1, RecvQueueSize: 1 << 20},
	} {
		once := c.Normalize()
		if twice := once.Normalize(); twice != once {
			t.Errorf("Normalize(%+v) = %+v, then %+v", c, once, twice)
		}
	}
	if c := (Config{InlineThreshold: NoInline}).Normalize(); c.InlineThreshold >= 0 {
		t.Errorf("NoInline normalised to %d: transfers up to that size would go inline", c.InlineThreshold)
	}
}

// After a 2 KiB first transfer (the send side was idle), a Write's bytes go
// out in transfers as large as rsocket allows: MaxTransfer, never across the
// end of the peer's target entry. rsocket's ramp (2, 4, 8, 16, 32 KiB) would
// cost six work requests, completions and credits per 64 KiB.
func TestLargeWriteTransfers(t *testing.T) {
	e := dataOnlyEngine(t, 1<<20, 150<<10)
	if n, err := e.Write(make([]byte, 200<<10)); n != 200<<10 || err != nil {
		t.Fatal(n, err)
	}
	wrs := e.PostSends(nil)
	// 150 KiB of target room: 2 KiB, two full transfers, then the 20 KiB
	// left in the entry; the last 50 KiB wait for the peer's next entry.
	want := []uint32{2 << 10, 64 << 10, 64 << 10, 20 << 10}
	if len(wrs) != len(want) {
		t.Fatalf("%d transfers, want %d: %+v", len(wrs), len(want), wrs)
	}
	addr := uint64(0xb00000)
	for i, w := range wrs {
		if w.Len() != want[i] || w.Imm != uint32(MakeMsg(MsgData, want[i])) || w.RemoteAddr != addr {
			t.Fatalf("transfer %d: %d bytes to %#x, want %d to %#x", i, w.Len(), w.RemoteAddr, want[i], addr)
		}
		addr += uint64(want[i])
	}
	if s := e.Stats(); s.BufferStalls == 0 {
		t.Fatalf("50 KiB left behind without a buffer stall: %+v", s)
	}
}
