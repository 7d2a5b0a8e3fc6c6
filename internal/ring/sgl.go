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
// It looks at the mailbox only while processing a credit message. The
// update that message carried, if any, has landed by then; a later update
// may have landed too (it is then taken early) or may still be landing.
// Reading an entry mid-DMA could show a torn value, so an entry that does
// not match is only rejected if it still reads the same at the next credit
// message, by which time any write in progress has long completed. The
// ordering checks need no such care: a correct peer never writes an entry
// the engine still uses, torn or not.

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
			if e.sglSuspect != (sglSuspect{entry: i, sge: s, set: true}) {
				e.sglSuspect = sglSuspect{entry: i, sge: s, set: true}
				return // look again at the next credit message
			}
			e.fail(protoErr(ErrBadSGL, m, fmt.Sprintf("entry %d = {addr %#x key %#x len %d}, want {addr %#x key %#x len %d}",
				i, s.Addr, s.Key, s.Length, want.Addr, want.Key, want.Length)))
			return
		}
		e.sglSuspect = sglSuspect{}
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

// sglSuspect is a mailbox entry that did not match when last read.
type sglSuspect struct {
	entry int
	sge   RemoteSGE
	set   bool
}
