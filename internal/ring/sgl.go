package ring

import (
	"encoding/binary"
	"fmt"
)

// The target region is a mailbox of two rs_sge entries the peer writes
// (RDMA WRITE, in our byte order) to advertise a free half of its rbuf,
// always together with a credit update. The protocol makes the updates
// strictly alternate between entry 1 and entry 0, starting with 1, and a
// correct peer writes an entry only after we have used up the previous
// grant in it: it can only free a half once it has read all of it, which
// means we wrote all of it.
//
// C rsocket uses the mailbox itself as its live state. The engine instead
// copies an update into tgt when it takes it and zeroes the mailbox entry,
// so that a later non-zero entry is always a fresh write it can check.
// It takes updates only while processing a credit message, whose write
// completion guarantees the mailbox write that preceded it has landed; an
// update that lands earlier than its own message is simply taken early.

// takeSGLUpdates takes every fresh mailbox entry, in protocol order, and
// rejects entries that are out of order, early, or not the half expected.
func (e *Engine) takeSGLUpdates(m Msg) {
	for {
		i := e.mailboxNext
		s := e.mailbox(i)
		if s == (RemoteSGE{}) {
			break
		}
		if e.tgt[i].Length != 0 {
			e.fail(protoErr(ErrUnexpectedSGL, m, fmt.Sprintf("entry %d rewritten with %d bytes still unused", i, e.tgt[i].Length)))
			return
		}
		want := RemoteSGE{Addr: e.peerBuf.Addr, Key: e.peerBuf.Key, Length: e.peerHalf}
		if i == 1 {
			want.Addr += uint64(e.peerHalf)
		}
		if s != want {
			e.fail(protoErr(ErrBadSGL, m, fmt.Sprintf("entry %d = {addr %#x key %#x len %d}, want {addr %#x key %#x len %d}",
				i, s.Addr, s.Key, s.Length, want.Addr, want.Key, want.Length)))
			return
		}
		e.tgt[i] = s
		e.clearMailbox(i)
		e.mailboxNext ^= 1
		e.stats.BufferGrantsReceived++
	}
	if other := e.mailboxNext ^ 1; e.mailbox(other) != (RemoteSGE{}) {
		e.fail(protoErr(ErrUnexpectedSGL, m, fmt.Sprintf("entry %d written out of order", other)))
	}
}

func (e *Engine) mailbox(i int) RemoteSGE {
	return getRemoteSGE(e.target.Buf[i*RemoteSGESize:], binary.NativeEndian)
}

func (e *Engine) clearMailbox(i int) {
	clear(e.target.Buf[i*RemoteSGESize : (i+1)*RemoteSGESize])
}
