package tcpqp

import "math/bits"

// fifo is a first-in first-out queue that reuses its array.
type fifo[T any] struct {
	buf  []T
	head int
}

func (f *fifo[T]) len() int { return len(f.buf) - f.head }

func (f *fifo[T]) push(v T) {
	if f.head > 0 && len(f.buf) == cap(f.buf) {
		// Slide the live entries down rather than grow past them.
		n := copy(f.buf, f.buf[f.head:])
		clear(f.buf[n:])
		f.buf, f.head = f.buf[:n], 0
	}
	f.buf = append(f.buf, v)
}

func (f *fifo[T]) pop() T {
	v := f.buf[f.head]
	var zero T
	f.buf[f.head] = zero // the entry may hold a payload the GC should have back
	f.head++
	if f.head == len(f.buf) {
		f.buf, f.head = f.buf[:0], 0
	}
	return v
}

// Payload buffers come in power-of-two classes, so that a landed frame's
// buffer serves the next frame of about its size without an allocation.
const (
	minClass = 6  // 64 bytes
	maxClass = 24 // 16 MiB; larger buffers are not kept
	// poolLimit bounds the bytes the free lists keep.
	poolLimit = 4 << 20
)

// bufPool keeps the payload buffers of landed frames; the QP's mu guards
// it.
type bufPool struct {
	free  [maxClass + 1][][]byte
	bytes int
}

// class returns the class of a buffer of n > 0 bytes.
func class(n int) int { return max(bits.Len(uint(n-1)), minClass) }

// take returns a kept buffer of n bytes, or nil if none fits.
func (p *bufPool) take(n int) []byte {
	c := class(n)
	if c > maxClass {
		return nil
	}
	l := p.free[c]
	if len(l) == 0 {
		return nil
	}
	b := l[len(l)-1]
	l[len(l)-1] = nil
	p.free[c] = l[:len(l)-1]
	p.bytes -= cap(b)
	return b[:n]
}

// newBuf allocates a buffer of n bytes with its class's capacity.
func newBuf(n int) []byte {
	if c := class(n); c <= maxClass {
		return make([]byte, n, 1<<c)
	}
	return make([]byte, n)
}

// put keeps b for reuse, unless the pool is full or b is of no class.
func (p *bufPool) put(b []byte) {
	c := cap(b)
	if c == 0 || c&(c-1) != 0 || p.bytes+c > poolLimit {
		return
	}
	cl := bits.Len(uint(c)) - 1
	if cl < minClass || cl > maxClass {
		return
	}
	p.free[cl] = append(p.free[cl], b[:0])
	p.bytes += c
}
