package ring

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/rnet-dev/rnet/internal/wr"
)

// iwarpEngine is an established iWARP engine over plain memory and the
// receives it posted, in order.
func iwarpEngine(t *testing.T) (*Engine, []wr.Recv) {
	t.Helper()
	e := newTestEngine(t, Config{IWARP: true})
	peer := ConnData{Version: 1, Flags: FlagIOMap, Credits: 64,
		TargetSGL: RemoteSGE{Addr: 0xa00000, Key: 0xaa, Length: 2},
		DataBuf:   RemoteSGE{Addr: 0x7f1234560000, Key: 0xbb, Length: 4096}}
	pd := peer.Encode()
	if err := e.Establish(pd[:]); err != nil {
		t.Fatal(err)
	}
	return e, e.PostRecvs(nil)
}

// iwarpMsg is the completion of the SEND that put m into receive r's slot.
func iwarpMsg(e *Engine, r wr.Recv, m Msg) wr.Completion {
	binary.NativeEndian.PutUint32(e.recv.Buf[r.SGE.Addr-e.recv.Addr:], uint32(m))
	return wr.Completion{ID: r.ID, Opcode: wr.WCRecv, ByteLen: MsgWordSize}
}

// writeEntry lands an update in entry i of the engine's target region, as
// the peer's RDMA WRITE does.
func writeEntry(e *Engine, i int, s RemoteSGE) {
	putRemoteSGE(e.target.Buf[i*RemoteSGESize:], s, binary.NativeEndian)
}

// TestIWARPTornEntryReadTwiceInOneBatch: two older credit messages polled in
// one batch both read entry 1 while its RDMA WRITE is still landing. The
// same torn value twice is no evidence: the entry is taken once whole.
func TestIWARPTornEntryReadTwiceInOneBatch(t *testing.T) {
	e, recvs := iwarpEngine(t)
	want := e.expectedSGE(1)
	torn := want
	torn.Addr &^= 0xffffffff // the low word not yet written
	writeEntry(e, 1, torn)
	if err := e.Complete([]wr.Completion{
		iwarpMsg(e, recvs[0], MakeMsg(MsgSGL, 64)),
		iwarpMsg(e, recvs[1], MakeMsg(MsgSGL, 64)),
	}); err != nil {
		t.Fatalf("a landing entry was judged: %v", err)
	}
	writeEntry(e, 1, want)
	if err := e.Complete([]wr.Completion{iwarpMsg(e, recvs[2], MakeMsg(MsgSGL, 64))}); err != nil {
		t.Fatal(err)
	}
	if got := e.Stats().BufferGrantsReceived; got != 1 {
		t.Fatalf("%d grants taken, want 1", got)
	}
}

// TestIWARPBadEntryRejected: an entry that does not name the half it must is
// rejected once the other entry has been written after it, which shows it
// has landed.
func TestIWARPBadEntryRejected(t *testing.T) {
	e, recvs := iwarpEngine(t)
	bad := e.expectedSGE(1)
	bad.Key ^= 1
	writeEntry(e, 1, bad)
	if err := e.Complete([]wr.Completion{iwarpMsg(e, recvs[0], MakeMsg(MsgSGL, 64))}); err != nil {
		t.Fatalf("judged before there was evidence: %v", err)
	}
	writeEntry(e, 0, e.expectedSGE(0))
	err := e.Complete([]wr.Completion{iwarpMsg(e, recvs[1], MakeMsg(MsgSGL, 64))})
	if !errors.Is(err, ErrBadSGL) {
		t.Fatalf("got %v, want ErrBadSGL", err)
	}
}
