package rnet

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/stream"
)

// io.Copy takes these, not its 32 KiB buffer, for a Conn either side.
var (
	_ io.ReaderFrom = (*Conn)(nil)
	_ io.WriterTo   = (*Conn)(nil)
)

// readerOnly hides a reader's WriteTo, so that io.Copy uses the
// destination's ReadFrom; oddReader also cuts its reads short.
type readerOnly struct{ io.Reader }

type oddReader struct {
	r   io.Reader
	rng *rand.Rand
}

func (o *oddReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1+o.rng.IntN(len(p))]
	}
	return o.r.Read(p)
}

// writerOnly hides a writer's ReadFrom, so that io.Copy uses the source's
// WriteTo.
type writerOnly struct{ io.Writer }

// copyBothWays sends size random bytes each way at once, with io.Copy into
// and out of the Conns, and checks what arrived by checksum.
func copyBothWays(t *testing.T, c, s *Conn, size int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i, ends := range [][2]*Conn{{c, s}, {s, c}} {
		src := make([]byte, size)
		rng := rand.New(rand.NewPCG(uint64(i), 42))
		for j := range src {
			src[j] = byte(rng.Uint32())
		}
		want := sha256.Sum256(src)
		wg.Add(2)
		go func() {
			defer wg.Done()
			n, err := io.Copy(ends[0], &oddReader{r: bytes.NewReader(src), rng: rng})
			if err == nil && n != int64(size) {
				err = errors.New("io.Copy into the Conn moved the wrong count")
			}
			if err == nil {
				err = ends[0].CloseWrite()
			}
			errs <- err
		}()
		go func() {
			defer wg.Done()
			h := sha256.New()
			n, err := io.Copy(writerOnly{h}, ends[1])
			if err == nil && (n != int64(size) || !bytes.Equal(h.Sum(nil), want[:])) {
				err = errors.New("the bytes io.Copy took out of the Conn differ from those sent")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestSimCopyChecksums(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  *Config
		size int
	}{
		{"Default", nil, 3<<20 + 12345},
		{"SmallRings", &Config{SendBufferSize: 4096, RecvBufferSize: 4096, IdleBufferSize: 1024}, 1<<20 + 7},
		{"NoDelay", &Config{NoDelay: true}, 1<<20 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := simPipe(t, tc.cfg)
			defer c.Close()
			defer s.Close()
			copyBothWays(t, c, s, tc.size)
		})
	}
}

// The copies take no buffer of their own: 0 allocations.
func TestSimCopyAllocs(t *testing.T) {
	c, s := simPipe(t, nil)
	defer c.Close()
	defer s.Close()
	chunk := make([]byte, 256<<10)
	src := &readerOnly{bytes.NewReader(chunk)}
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, s) // s.WriteTo
		done <- err
	}()
	allocs := testing.AllocsPerRun(20, func() {
		src.Reader.(*bytes.Reader).Reset(chunk)
		if n, err := io.Copy(c, src); err != nil || n != int64(len(chunk)) {
			t.Fatalf("io.Copy = %d, %v", n, err)
		}
	})
	if allocs > 0 {
		t.Errorf("io.Copy into a Conn: %v allocations, want 0", allocs)
	}
	c.CloseWrite()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// blockingWriter blocks in Write until released, and says when it was
// entered.
type blockingWriter struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	return len(p), nil
}

// WriteTo calls its writer with no lock held: while the writer blocks, the
// connection's other direction carries data, and Close returns.
func TestSimWriteToSlowWriter(t *testing.T) {
	var destroyed atomic.Int32
	c, s := simPipeWrap(t, nil, func(q *simqp.QP) stream.QueuePair { return &destroyCounter{QP: q, n: &destroyed} })
	defer s.Close()
	w := &blockingWriter{entered: make(chan struct{}), release: make(chan struct{})}
	copied := make(chan error, 1)
	go func() {
		_, err := c.WriteTo(w)
		copied <- err
	}()
	if _, err := s.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	<-w.entered
	// The writer holds received bytes; the other direction goes on.
	msg := []byte("while the writer blocks")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(s, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("peer read %q, %v; want %q", got, err, msg)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := destroyed.Load(); n != 0 {
		t.Errorf("Close destroyed the queue pair while WriteTo's writer held ring memory")
	}
	close(w.release)
	if err := <-copied; !errors.Is(err, net.ErrClosed) {
		t.Errorf("WriteTo after Close = %v, want net.ErrClosed", err)
	}
	if n := destroyed.Load(); n != 1 {
		t.Errorf("queue pair destroyed %d times once WriteTo returned, want 1", n)
	}
}

// blockingReader returns a few bytes, then blocks in Read until released.
type blockingReader struct {
	entered chan struct{}
	release chan struct{}
	reads   int
}

func (r *blockingReader) Read(p []byte) (int, error) {
	r.reads++
	if r.reads == 1 {
		return copy(p, "hello"), nil
	}
	close(r.entered)
	<-r.release
	return copy(p, "late"), nil
}

// ReadFrom calls its reader with no lock held: while the reader blocks, what
// it gave before reaches the peer, the peer's data is read, and Close
// returns.
func TestSimReadFromSlowReader(t *testing.T) {
	var destroyed atomic.Int32
	c, s := simPipeWrap(t, nil, func(q *simqp.QP) stream.QueuePair { return &destroyCounter{QP: q, n: &destroyed} })
	defer s.Close()
	r := &blockingReader{entered: make(chan struct{}), release: make(chan struct{})}
	copied := make(chan error, 1)
	go func() {
		_, err := c.ReadFrom(r)
		copied <- err
	}()
	<-r.entered
	got := make([]byte, 5)
	if _, err := io.ReadFull(s, got); err != nil || string(got) != "hello" {
		t.Fatalf("peer read %q, %v; want hello", got, err)
	}
	if _, err := s.Write([]byte("reply")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "reply" {
		t.Fatalf("read %q, %v while ReadFrom's reader blocks; want reply", got, err)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close waited for ReadFrom's reader")
	}
	if n := destroyed.Load(); n != 0 {
		t.Errorf("Close destroyed the queue pair while ReadFrom's reader held ring memory")
	}
	close(r.release)
	if err := <-copied; !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadFrom after Close = %v, want net.ErrClosed", err)
	}
	if n := destroyed.Load(); n != 1 {
		t.Errorf("queue pair destroyed %d times once ReadFrom returned, want 1", n)
	}
}

// destroyCounter counts the queue pair's Destroy calls.
type destroyCounter struct {
	*simqp.QP
	n *atomic.Int32
}

func (q *destroyCounter) Destroy() error {
	q.n.Add(1)
	return q.QP.Destroy()
}

// A write deadline ends a ReadFrom waiting for room, as it ends a Write.
func TestSimReadFromDeadline(t *testing.T) {
	c, s := simPipe(t, &Config{SendBufferSize: 4096, RecvBufferSize: 4096, IdleBufferSize: 4096})
	defer c.Close()
	defer s.Close()
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := c.ReadFrom(readerOnly{zeroReader{}})
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || n == 0 {
		t.Errorf("ReadFrom of an endless reader to a peer that does not read = %d, %v; want a timeout after some bytes", n, err)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }
