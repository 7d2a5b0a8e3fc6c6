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
//
// What an update may say differs by transport. On RoCE and InfiniBand any
// grant of 1 to MaxBufSize bytes is taken, whatever its address and key:
// a receiver may grant from any region it likes (an rnet receiver moves
// its ring to larger or smaller regions, see regions.go), and the address
// and key name the peer's own memory, which our writes reach only through
// its protection domain, so a bad grant can hurt nobody but the peer. On
// iWARP an update must name the half rsocket would advertise next, for the
// reason below.
//
// When to read the mailbox is the subtle part: the peer may already be
// writing the next update while we process an older credit message, and an
// entry read mid-DMA shows a torn value. On RoCE and InfiniBand the update
// and its credit message are one RDMA WRITE WITH IMMEDIATE, so the receive
// completion's byte count tells which messages carried an update, and such
// an update has landed when its completion is seen: it is judged then, and
// only then. On iWARP the update is a separate RDMA WRITE before the message
// SEND, and the completion cannot tell which message follows it: an entry
// that does not match may still be landing, however often it reads the same
// (two messages polled in one batch read it nanoseconds apart). It is
// rejected only once the other entry has been written too, which the peer
// does after this one's message (iWARP places a connection's writes in
// order); until then it is left alone. A peer that leaves garbage there
// only withholds its grant, which it can always do.

// takeLandedSGLUpdate takes the update that the credit message m carried
// (RoCE and InfiniBand, where the two travel in one RDMA WRITE WITH
// IMMEDIATE). It has landed, so it is judged at once (any grant of a sane
// length, see above); later updates may be
// landing while we read, so the mailbox is not searched for them: each is
// taken when its own message completes.
func (e *Engine) takeLandedSGLUpdate(m Msg) {
	i := e.mailboxNext
	s := e.mailbox(i)
	if e.tgt[i].Length != 0 {
		e.fail(protoErr(ErrUnexpectedSGL, m, fmt.Sprintf("entry %d rewritten with %d bytes still unused", i, e.tgt[i].Length)))
		return
	}
	if s.Length == 0 || s.Length > MaxBufSize || s.Addr+uint64(s.Length) < s.Addr {
		if s == (RemoteSGE{}) {
			if o := e.mailbox(i ^ 1); o != (RemoteSGE{}) {
				e.fail(protoErr(ErrUnexpectedSGL, m, fmt.Sprintf("entry %d written out of order", i^1)))
				return
			}
		}
		e.fail(protoErr(ErrBadSGL, m, fmt.Sprintf("entry %d = {addr %#x key %#x len %d}, want 1 to %d bytes",
			i, s.Addr, s.Key, s.Length, MaxBufSize)))
		return
	}
	e.tgt[i] = s
	e.clearMailbox(i)
	e.mailboxNext ^= 1
	e.stats.BufferGrantsReceived++
}

// expectedSGE is the only update entry i can carry: rsocket advertises its
// first half with the connection, then the second half in entry 1 and the
// first in entry 0, alternately, so each entry always names the same half.
func (e *Engine) expectedSGE(i int) RemoteSGE {
	want := RemoteSGE{Addr: e.peerBuf.Addr, Key: e.peerBuf.Key, Length: e.peerHalf}
	if i == 1 {
		want.Addr += uint64(e.peerHalf)
	}
	return want
}

// takeSGLUpdates (iWARP) takes every fresh mailbox entry, in protocol order, and
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
		if want := e.expectedSGE(i); s != want {
			if e.mailbox(i^1) == (RemoteSGE{}) {
				return // may be landing: see above
			}
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
