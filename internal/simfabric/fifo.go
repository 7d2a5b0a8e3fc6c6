package simfabric

// queue is a FIFO on a ring buffer that grows by doubling, so steady-state
// pushes and pops do not allocate.
type queue[T any] struct {
	buf  []T
	head int
	n    int
}

func (q *queue[T]) len() int { return q.n }

func (q *queue[T]) push(v T) {
	if q.n == len(q.buf) {
		nb := make([]T, max(16, 2*len(q.buf)))
		for i := 0; i < q.n; i++ {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = v
	q.n++
}

// front returns a pointer to the oldest element; the queue must not be empty.
func (q *queue[T]) front() *T { return &q.buf[q.head] }

// pushFront puts back an element just popped.
func (q *queue[T]) pushFront(v T) {
	if q.n == len(q.buf) {
		q.push(v) // grow, then rotate it to the front
		for i := 0; i < q.n-1; i++ {
			q.push(q.pop())
		}
		return
	}
	q.head = (q.head - 1 + len(q.buf)) % len(q.buf)
	q.buf[q.head] = v
	q.n++
}

func (q *queue[T]) pop() T {
	v := q.buf[q.head]
	var zero T
	q.buf[q.head] = zero
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return v
}

// byteFIFO holds payload bytes between posting and landing. Positions are
// absolute counters; [tail, head) is live.
type byteFIFO struct {
	buf  []byte
	head uint64
	tail uint64
}

// push appends b and returns its start position.
func (q *byteFIFO) push(b []byte) uint64 {
	need := q.head - q.tail + uint64(len(b))
	if need > uint64(len(q.buf)) {
		size := max(4096, len(q.buf))
		for uint64(size) < need {
			size *= 2
		}
		nb := make([]byte, size)
		for p := q.tail; p < q.head; {
			c := copy(nb[p%uint64(size):], q.chunk(p, q.head))
			p += uint64(c)
		}
		q.buf = nb
	}
	start := q.head
	for len(b) > 0 {
		c := copy(q.buf[q.head%uint64(len(q.buf)):], b)
		b = b[c:]
		q.head += uint64(c)
	}
	return start
}

// chunk returns the contiguous bytes from p up to end or the end of buf.
func (q *byteFIFO) chunk(p, end uint64) []byte {
	size := uint64(len(q.buf))
	off := p % size
	return q.buf[off:min(size, off+end-p)]
}

// read copies [start, start+len(dst)) into dst.
func (q *byteFIFO) read(dst []byte, start uint64) {
	end := start + uint64(len(dst))
	for p := start; p < end; {
		c := copy(dst[p-start:], q.chunk(p, end))
		p += uint64(c)
	}
}

// release frees everything before end.
func (q *byteFIFO) release(end uint64) {
	if end > q.tail {
		q.tail = end
	}
}
