package tcpqp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/rnet-dev/rnet/internal/wr"
)

// The byte stream: frame headers, the reader that queues the peer's frames
// and the writer that sends ours. See the package doc for the format.

const headerSize = 24

// readBufSize is the reader's buffer: small frames (credit updates, SGL
// updates) then cost no read each.
const readBufSize = 64 << 10

// frame is one of the peer's work requests, waiting to land.
type frame struct {
	op      wr.Opcode
	imm     uint32
	rkey    uint32
	addr    uint64
	payload []byte
}

func putHeader(b []byte, op wr.Opcode, imm, n, rkey uint32, addr uint64) {
	b[0], b[1], b[2], b[3] = byte(op), 0, 0, 0
	binary.BigEndian.PutUint32(b[4:], imm)
	binary.BigEndian.PutUint32(b[8:], n)
	binary.BigEndian.PutUint32(b[12:], rkey)
	binary.BigEndian.PutUint64(b[16:], addr)
}

// parseHeader decodes a header and checks what it can alone; it returns
// the frame without its payload, and the payload's length.
func (q *QP) parseHeader(h *[headerSize]byte, maxFrame int) (frame, int, error) {
	f := frame{
		op:   wr.Opcode(h[0]),
		imm:  binary.BigEndian.Uint32(h[4:]),
		rkey: binary.BigEndian.Uint32(h[12:]),
		addr: binary.BigEndian.Uint64(h[16:]),
	}
	n := int(binary.BigEndian.Uint32(h[8:]))
	switch {
	case h[1]|h[2]|h[3] != 0:
		return f, 0, fmt.Errorf("tcpqp: the peer at %v sent a frame header whose reserved bytes are % x, not zero", q.raddr, h[1:4])
	case f.op > wr.OpSendImm:
		return f, 0, fmt.Errorf("tcpqp: the peer at %v sent a frame of unknown opcode %d", q.raddr, h[0])
	case n > maxFrame:
		return f, 0, fmt.Errorf("tcpqp: the peer at %v sent a %d-byte %v frame, over the %d-byte bound", q.raddr, n, f.op, maxFrame)
	}
	return f, n, nil
}

// reader queues the peer's frames for Step to land, until the connection
// ends. In the error state it reads on but drops what it reads, so that a
// peer still sending does not block before it sees our FIN.
func (q *QP) reader() {
	defer q.wg.Done()
	defer close(q.readerDone)
	br := bufio.NewReaderSize(q.conn, readBufSize)
	var h [headerSize]byte
	for {
		if _, err := io.ReadFull(br, h[:]); err != nil {
			q.readFailed(err, true)
			return
		}
		q.mu.Lock()
		maxFrame, _ := q.mem.bounds()
		dropping := q.qpErr
		q.mu.Unlock()
		f, n, err := q.parseHeader(&h, maxFrame)
		if err != nil {
			if !dropping {
				q.fail(err)
			}
			return
		}
		if dropping {
			if _, err := io.CopyN(io.Discard, br, int64(n)); err != nil {
				q.readFailed(err, false)
				return
			}
			continue
		}
		if !q.waitRoom(headerSize + n) {
			return
		}
		if n > 0 {
			q.mu.Lock()
			f.payload = q.pool.take(n)
			q.mu.Unlock()
			if f.payload == nil {
				f.payload = newBuf(n)
			}
			if _, err := io.ReadFull(br, f.payload); err != nil {
				q.readFailed(err, false)
				return
			}
		}
		q.mu.Lock()
		if q.qpErr {
			q.pool.put(f.payload)
		} else {
			q.inbound.push(f)
			q.inBytes += headerSize + n
			signal(q.notify)
		}
		q.mu.Unlock()
	}
}

// waitRoom waits until a frame of size bytes fits in the inbound queue:
// meanwhile nothing is read, and TCP flow control holds the peer back. An
// empty queue takes any frame. It reports false once Destroy was called.
func (q *QP) waitRoom(size int) bool {
	for {
		q.mu.Lock()
		_, maxInbound := q.mem.bounds()
		ok := q.inBytes == 0 || q.inBytes+size <= maxInbound || q.qpErr
		q.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-q.room:
		case <-q.done:
			return false
		}
	}
}

// readFailed ends the path after a read error: EOF between frames is the
// peer's disconnect; anything else fails the transport. After Destroy
// closed the socket it is no news.
func (q *QP) readFailed(err error, between bool) {
	select {
	case <-q.done:
		return
	default:
	}
	switch {
	case between && err == io.EOF:
		q.mu.Lock()
		q.enterErrorLocked()
		q.raiseLocked(nil)
		q.mu.Unlock()
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		q.fail(fmt.Errorf("tcpqp: the peer at %v closed the connection in the middle of a frame", q.raddr))
	default:
		q.fail(fmt.Errorf("tcpqp: read from %v: %w", q.raddr, err))
	}
}

// writer sends the queued frames, a batch per write, and completes their
// sends once the kernel has them. In the error state it stops and closes
// the write side, so that the peer reads a FIN after the last frame that
// went out.
func (q *QP) writer() {
	defer q.wg.Done()
	for {
		select {
		case <-q.wake:
		case <-q.done:
			return
		}
		for {
			q.mu.Lock()
			if q.qpErr {
				q.mu.Unlock()
				q.conn.CloseWrite() // fails only on a socket already closed or reset
				return
			}
			if len(q.out) == 0 {
				q.mu.Unlock()
				break
			}
			buf := q.out
			q.out, q.spare = q.spare[:0], nil
			q.writing, q.pending = q.pending, q.writing[:0]
			q.mu.Unlock()

			_, err := q.conn.Write(buf)

			q.mu.Lock()
			q.spare = buf[:0]
			if err == nil {
				q.completeWrittenLocked()
			}
			q.mu.Unlock()
			if err != nil {
				q.writeFailed(err)
			}
		}
	}
}

// completeWrittenLocked completes the sends of the batch just written: a
// signaled one with a completion, an unsignaled one by freeing its queue
// entry. A flush may have completed them already.
func (q *QP) completeWrittenLocked() {
	done := false
	for _, s := range q.writing {
		if !s.signaled {
			q.sendsOut--
			continue
		}
		q.cq.push(wr.Completion{ID: s.id, Opcode: sendWCOpcode(s.op)})
		done = true
	}
	q.writing = q.writing[:0]
	if done {
		signal(q.notify)
	}
}

// writeFailed ends the path after a write error (a reset, the user
// timeout); after Destroy closed the socket it is no news.
func (q *QP) writeFailed(err error) {
	select {
	case <-q.done:
		q.mu.Lock()
		q.enterErrorLocked()
		q.mu.Unlock()
	default:
		q.fail(fmt.Errorf("tcpqp: write to %v: %w", q.raddr, err))
	}
}
