package tcpqp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// Tests that drive a queue pair directly, with a raw TCP peer that writes
// and reads frames itself.

// event is one transport event; err nil is TransportDisconnected.
type event struct{ err error }

// recorder passes events to a test, and kicks the queue pair so that a
// test parked in Wait sees them.
type recorder struct {
	ch chan event
	q  *QP
}

func (r recorder) TransportDisconnected() { r.ch <- event{}; r.q.Kick() }
func (r recorder) TransportFailed(err error) {
	r.ch <- event{err: err}
	r.q.Kick()
}

// rig is a started queue pair with a receive region, a send region and
// recvs posted receives (IDs 1..recvs, no SGE), and the raw peer.
type rig struct {
	t      *testing.T
	q      *QP
	peer   *net.TCPConn
	recv   ring.Region
	send   ring.Region
	events recorder
	before map[string]bool
}

func newRig(t *testing.T, recvs int) *rig {
	t.Helper()
	before := procstat.GoroutineIDs()
	a, b := tcpPair(t)
	q := New(a, Options{SendDepth: 4, RecvDepth: 8})
	r := &rig{t: t, q: q, peer: b, events: recorder{ch: make(chan event, 1), q: q}, before: before}
	var err error
	if r.recv, err = r.q.AddRegion(ring.RegionRecv, 4096); err != nil {
		t.Fatal(err)
	}
	if r.send, err = r.q.AddRegion(ring.RegionSend, 4096); err != nil {
		t.Fatal(err)
	}
	var ws []wr.Recv
	for i := range recvs {
		ws = append(ws, wr.Recv{ID: uint64(i + 1)})
	}
	if _, err := r.q.Step(0, ws, nil, nil, 1); err != nil {
		t.Fatal(err)
	}
	r.q.Start(r.events)
	return r
}

// close tears the rig down and checks that no goroutine is left.
func (r *rig) close() {
	r.t.Helper()
	r.q.Shutdown()
	if err := r.q.Destroy(); err != nil {
		r.t.Error(err)
	}
	r.peer.Close()
	if left := procstat.WaitNoNewGoroutines(r.before); len(left) > 0 {
		r.t.Fatalf("%d goroutines left:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// frameBytes encodes a frame as a peer would.
func frameBytes(op wr.Opcode, imm uint32, rkey uint32, addr uint64, payload []byte) []byte {
	b := make([]byte, headerSize+len(payload))
	putHeader(b, op, imm, uint32(len(payload)), rkey, addr)
	copy(b[headerSize:], payload)
	return b
}

// poll steps until want completions came, waiting in between.
func (r *rig) poll(want int) []wr.Completion {
	r.t.Helper()
	got, _ := r.pollEvent(want, false)
	return got
}

// pollEvent steps until want completions came and, if withEvent, the
// transport event did, waiting in between.
func (r *rig) pollEvent(want int, withEvent bool) ([]wr.Completion, event) {
	r.t.Helper()
	var got []wr.Completion
	var ev event
	out := make([]wr.Completion, 4)
	for len(got) < want || withEvent {
		n, err := r.q.Step(0, nil, nil, out, 1)
		if err != nil {
			r.t.Fatal(err)
		}
		got = append(got, out[:n]...)
		if withEvent {
			select {
			case ev = <-r.events.ch:
				withEvent = false
				continue
			default:
			}
		}
		if n == 0 {
			if _, err := r.q.Wait(); err != nil {
				r.t.Fatal(err)
			}
		}
	}
	if len(got) > want {
		r.t.Fatalf("%d completions, want %d: %+v", len(got), want, got)
	}
	return got, ev
}

// event returns the transport event, waiting up to a minute for it.
func (r *rig) event() event {
	r.t.Helper()
	select {
	case ev := <-r.events.ch:
		return ev
	case <-time.After(time.Minute):
		r.t.Fatal("no transport event")
		return event{}
	}
}

// checkFlushed checks that every completion is a flush but the first ones,
// whose statuses are lead, and that a send posted now is flushed too.
func (r *rig) checkFlushed(got []wr.Completion, lead ...wr.WCStatus) {
	r.t.Helper()
	for i, wc := range got {
		want := wr.WCWRFlushErr
		if i < len(lead) {
			want = lead[i]
		}
		if wc.Status != want {
			r.t.Errorf("completion %d is %+v, want status %v", i, wc, want)
		}
	}
	s := wr.Send{ID: 77, Op: wr.OpWrite, Signaled: true, NumSGE: 1,
		SGE: [2]wr.SGE{{Addr: r.send.Addr, Length: 8, LKey: r.send.LKey}}, RemoteAddr: 1, RKey: 1}
	out := make([]wr.Completion, 4)
	n, err := r.q.Step(0, nil, []wr.Send{s}, out, 1)
	if err != nil || n != 1 || out[0].ID != 77 || out[0].Status != wr.WCWRFlushErr || out[0].Opcode != wr.WCRDMAWrite {
		r.t.Errorf("a send posted in the error state gave %+v, %v; want its flush", out[:n], err)
	}
}

// A peer that breaks the protocol fails the transport with an error that
// says how, and the queue pair flushes what is outstanding; nothing lands
// outside the rules.
func TestUntrustedPeer(t *testing.T) {
	cases := []struct {
		name  string
		recvs int
		frame func(r *rig) []byte
		lead  []wr.WCStatus // the statuses of the completions before the flushes
		want  string
	}{
		{"bad rkey", 2, func(r *rig) []byte {
			return frameBytes(wr.OpWriteImm, 5, r.recv.RKey^1, r.recv.Addr, bytes.Repeat([]byte{0xaa}, 4096))
		}, nil, "wrote 4096 bytes at"},
		{"a send region's keys", 2, func(r *rig) []byte {
			return frameBytes(wr.OpWrite, 0, r.send.RKey, r.send.Addr, []byte{0xaa})
		}, nil, "outside any receive region"},
		{"past the region's end", 2, func(r *rig) []byte {
			return frameBytes(wr.OpWrite, 0, r.recv.RKey, r.recv.Addr+4090, bytes.Repeat([]byte{0xaa}, 16))
		}, nil, "outside any receive region"},
		{"address wraps", 2, func(r *rig) []byte {
			return frameBytes(wr.OpWrite, 0, r.recv.RKey, ^uint64(0)-3, bytes.Repeat([]byte{0xaa}, 16))
		}, nil, "outside any receive region"},
		{"over the bound", 2, func(r *rig) []byte {
			b := frameBytes(wr.OpWrite, 0, r.recv.RKey, r.recv.Addr, nil)
			binary.BigEndian.PutUint32(b[8:], maxFrameFloor+1)
			return b
		}, nil, "over the 65536-byte bound"},
		{"reserved byte", 2, func(r *rig) []byte {
			b := frameBytes(wr.OpWriteImm, 0, r.recv.RKey, r.recv.Addr, nil)
			b[2] = 1
			return b
		}, nil, "reserved bytes"},
		{"unknown opcode", 2, func(r *rig) []byte {
			return frameBytes(wr.Opcode(9), 0, 0, 0, nil)
		}, nil, "unknown opcode 9"},
		{"no receive posted", 1, func(r *rig) []byte {
			return append(frameBytes(wr.OpWriteImm, 1, 0, 0, nil), frameBytes(wr.OpWriteImm, 2, 0, 0, nil)...)
		}, []wr.WCStatus{wr.WCSuccess}, "no receive posted"},
		{"send too long", 2, func(r *rig) []byte {
			return frameBytes(wr.OpSend, 0, 0, 0, []byte("no room"))
		}, []wr.WCStatus{wr.WCLocLenErr}, "7-byte SEND to a 0-byte receive"},
		{"end in a frame", 2, func(r *rig) []byte {
			return frameBytes(wr.OpWrite, 0, r.recv.RKey, r.recv.Addr, []byte("cut"))[:headerSize+1]
		}, nil, "in the middle of a frame"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, c.recvs)
			if _, err := r.peer.Write(c.frame(r)); err != nil {
				t.Fatal(err)
			}
			if c.name == "end in a frame" {
				r.peer.CloseWrite()
			}
			got, ev := r.pollEvent(c.recvs, true)
			r.checkFlushed(got, c.lead...)
			if ev.err == nil || !strings.Contains(ev.err.Error(), c.want) {
				t.Errorf("event %v, want TransportFailed saying %q", ev.err, c.want)
			}
			if !bytes.Equal(r.recv.Buf, make([]byte, len(r.recv.Buf))) || !bytes.Equal(r.send.Buf, make([]byte, len(r.send.Buf))) {
				t.Error("the peer's bytes landed")
			}
			// We close our side: the peer reads a FIN.
			if _, err := io.Copy(io.Discard, r.peer); err != nil {
				t.Errorf("peer: %v", err)
			}
			r.close()
		})
	}
}

// A peer that closes its socket disconnects the transport, after what it
// sent before has landed; what is outstanding is flushed.
func TestPeerVanishes(t *testing.T) {
	r := newRig(t, 3)
	if _, err := r.peer.Write(frameBytes(wr.OpWriteImm, 42, r.recv.RKey, r.recv.Addr+8, []byte("last"))); err != nil {
		t.Fatal(err)
	}
	r.peer.Close()
	if ev := r.event(); ev.err != nil {
		t.Errorf("event TransportFailed(%v), want TransportDisconnected", ev.err)
	}
	got := r.poll(3)
	if wc := got[0]; wc.ID != 1 || wc.Opcode != wr.WCRecvRDMAWithImm || wc.Imm != 42 || wc.ByteLen != 4 {
		t.Errorf("first completion %+v, want the write's", wc)
	}
	if string(r.recv.Buf[8:12]) != "last" {
		t.Errorf("region holds %q, want the last write", r.recv.Buf[8:12])
	}
	r.checkFlushed(got, wr.WCSuccess)
	r.close()
}

// Frames go out in the documented format, and the peer's valid frames land
// with the completions RDMA would give.
func TestFrames(t *testing.T) {
	r := newRig(t, 2)
	// A receive with a buffer, for the peer's SEND.
	buf := wr.Recv{ID: 3, NumSGE: 1, SGE: wr.SGE{Addr: r.send.Addr + 100, Length: 16, LKey: r.send.LKey}}
	if _, err := r.q.Step(0, []wr.Recv{buf}, nil, nil, 1); err != nil {
		t.Fatal(err)
	}
	copy(r.send.Buf, "helloworld")
	sends := []wr.Send{
		{ID: 10, Op: wr.OpWrite, NumSGE: 2, RemoteAddr: 0x1122334455667788, RKey: 0xdeadbeef,
			SGE: [2]wr.SGE{{Addr: r.send.Addr, Length: 5, LKey: r.send.LKey}, {Addr: r.send.Addr + 5, Length: 5, LKey: r.send.LKey}}},
		{ID: 11, Op: wr.OpWriteImm, Imm: 0x01020304, Signaled: true, RemoteAddr: 8, RKey: 9},
		{ID: 12, Op: wr.OpSendImm, Imm: 7, Signaled: true, Inline: true, NumSGE: 1,
			SGE: [2]wr.SGE{{Addr: r.send.Addr + 5, Length: 5}}},
	}
	if _, err := r.q.Step(0, nil, sends, nil, 1); err != nil {
		t.Fatal(err)
	}
	want := [][]byte{
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0xde, 0xad, 0xbe, 0xef, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88},
		[]byte("helloworld"),
		{1, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 8},
		{3, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		[]byte("world"),
	}
	wire := make([]byte, len(bytes.Join(want, nil)))
	if _, err := io.ReadFull(r.peer, wire); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(wire, bytes.Join(want, nil)) {
		t.Errorf("frames on the wire:\n% x\nwant\n% x", wire, bytes.Join(want, nil))
	}
	got := r.poll(2) // the unsignaled write completes nothing
	for i, id := range []uint64{11, 12} {
		if wc := got[i]; wc.ID != id || wc.Status != wr.WCSuccess || wc.Opcode != sendWCOpcode(sends[i+1].Op) {
			t.Errorf("send completion %d: %+v", i, wc)
		}
	}

	in := bytes.Join([][]byte{
		frameBytes(wr.OpWrite, 0, r.recv.RKey, r.recv.Addr+4000, []byte("quiet")),
		frameBytes(wr.OpWriteImm, 99, r.recv.RKey, r.recv.Addr+4091, []byte("edge!")),
		frameBytes(wr.OpWriteImm, 98, 0, 0, nil),
		frameBytes(wr.OpSendImm, 97, 0, 0, []byte("message")),
	}, nil)
	if _, err := r.peer.Write(in); err != nil {
		t.Fatal(err)
	}
	got = r.poll(3)
	wantWCs := []wr.Completion{
		{ID: 1, Opcode: wr.WCRecvRDMAWithImm, Imm: 99, ByteLen: 5},
		{ID: 2, Opcode: wr.WCRecvRDMAWithImm, Imm: 98},
		{ID: 3, Opcode: wr.WCRecv, Imm: 97, ByteLen: 7},
	}
	for i := range wantWCs {
		if got[i] != wantWCs[i] {
			t.Errorf("receive completion %d: %+v, want %+v", i, got[i], wantWCs[i])
		}
	}
	if s := string(r.recv.Buf[4000:4005]) + string(r.recv.Buf[4091:]) + string(r.send.Buf[100:107]); s != "quietedge!message" {
		t.Errorf("landed %q", s)
	}

	// The send queue holds 4: a fifth outstanding send is refused.
	s := wr.Send{ID: 20, Op: wr.OpWriteImm, Signaled: true}
	if _, err := r.q.Step(0, nil, []wr.Send{s, s, s, s, s}, nil, 1); !errors.Is(err, errQueueFull) {
		t.Errorf("posting past the send depth: %v, want errQueueFull", err)
	}
	r.q.Disconnect()
	r.q.Disconnect()
	got = r.poll(4)
	// The four were written or flushed; either way each completed once.
	for _, wc := range got {
		if wc.ID != 20 || wc.Status != wr.WCSuccess && wc.Status != wr.WCWRFlushErr {
			t.Errorf("completion %+v", wc)
		}
	}
	// Disconnect closed our write side: the peer reads to EOF.
	if _, err := io.Copy(io.Discard, r.peer); err != nil {
		t.Errorf("peer: %v", err)
	}
	r.peer.CloseWrite()
	if ev := r.event(); ev.err != nil {
		t.Errorf("event TransportFailed(%v), want TransportDisconnected", ev.err)
	}
	r.close()
}

// TestFloodOfWritesIsBounded: a peer's flood of frames that complete
// nothing (zero-length RDMA WRITEs), all queued, is landed 256 frames a
// step, not the whole inbound queue under the caller's lock; the steps
// after it land the rest, and the frame behind the flood completes.
func TestFloodOfWritesIsBounded(t *testing.T) {
	r := newRig(t, 1)
	defer r.close()
	const flood, perStep = 1024, 256
	var b []byte
	for range flood {
		b = append(b, frameBytes(wr.OpWrite, 0, r.recv.RKey, r.recv.Addr, nil)...)
	}
	b = append(b, frameBytes(wr.OpWriteImm, 7, r.recv.RKey, r.recv.Addr, []byte("end"))...)
	if _, err := r.peer.Write(b); err != nil {
		t.Fatal(err)
	}
	queued := func() int {
		r.q.mu.Lock()
		defer r.q.mu.Unlock()
		return r.q.inbound.len()
	}
	for queued() < flood+1 {
		if _, err := r.q.Wait(); err != nil { // woken as frames arrive
			t.Fatal(err)
		}
	}
	out := make([]wr.Completion, 4)
	for step := 1; ; step++ {
		before := queued()
		n, err := r.q.Step(0, nil, nil, out, 1)
		if err != nil {
			t.Fatal(err)
		}
		if landed := before - queued(); landed > perStep {
			t.Fatalf("step %d landed %d frames, more than %d", step, landed, perStep)
		}
		if n == 1 {
			if out[0].Imm != 7 || out[0].Status != wr.WCSuccess {
				t.Fatalf("the last frame's completion: %+v", out[0])
			}
			if step <= flood/perStep {
				t.Errorf("%d frames landed in %d steps", flood+1, step)
			}
			return
		}
	}
}

// A queue pair destroyed while its peer still sends closes only after the
// peer's FIN: closing with the peer's frames unread would reset the
// connection, and the peer's kernel would drop the frames it had from us
// and had not yet read, though their sends had completed here. Each round
// races the peer's last frame against the destroy.
func TestDestroyWaitsForThePeersFIN(t *testing.T) {
	for round := range 50 {
		r := newRig(t, 2)
		copy(r.send.Buf, "the last words")
		last := wr.Send{ID: 7, Op: wr.OpWrite, Signaled: true, NumSGE: 1, RemoteAddr: 64, RKey: 5,
			SGE: [2]wr.SGE{{Addr: r.send.Addr, Length: 14, LKey: r.send.LKey}}}
		if _, err := r.q.Step(0, nil, []wr.Send{last}, nil, 1); err != nil {
			t.Fatal(err)
		}
		if got := r.poll(1); got[0].ID != 7 || got[0].Status != wr.WCSuccess {
			t.Fatalf("round %d: completion %+v, want the write's", round, got[0])
		}
		// The frame is in the peer's socket, unread. The queue pair goes
		// away while the peer sends a frame of its own.
		r.q.Disconnect()
		r.q.Shutdown()
		destroyed := make(chan error, 1)
		go func() { destroyed <- r.q.Destroy() }()
		if _, err := r.peer.Write(frameBytes(wr.OpWrite, 0, r.recv.RKey, r.recv.Addr, []byte("late"))); err != nil {
			t.Fatalf("round %d: the peer's write: %v", round, err)
		}
		r.peer.CloseWrite()
		if err := <-destroyed; err != nil {
			t.Fatalf("round %d: Destroy: %v", round, err)
		}
		wire, err := io.ReadAll(r.peer)
		if err != nil {
			t.Fatalf("round %d: the peer read %d bytes, then %v: its unread frames were dropped", round, len(wire), err)
		}
		if want := frameBytes(wr.OpWrite, 0, 5, 64, []byte("the last words")); !bytes.Equal(wire, want) {
			t.Fatalf("round %d: the peer read\n% x\nwant\n% x", round, wire, want)
		}
		r.peer.Close()
		if left := procstat.WaitNoNewGoroutines(r.before); len(left) > 0 {
			t.Fatalf("%d goroutines left:\n%s", len(left), strings.Join(left, "\n\n"))
		}
	}
}
