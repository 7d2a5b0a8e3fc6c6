package stream

import (
	"errors"
	"io"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/wr"
)

// Resumes under the calls that lend ring memory or write while the path is
// down, and on a removed device.

// gatedReader yields patterned bytes, total of them; the first Read after
// it has yielded gate bytes says so on at and returns only once pass is
// closed, holding the ring memory ReadFrom lent it all the while.
type gatedReader struct {
	off, total, gate int
	salt             uint64
	at, pass         chan struct{}
}

func (r *gatedReader) Read(p []byte) (int, error) {
	if r.off >= r.total {
		return 0, io.EOF
	}
	if r.at != nil && r.off >= r.gate {
		close(r.at)
		r.at = nil
		<-r.pass
	}
	n := min(len(p), r.total-r.off)
	for i := range p[:n] {
		p[i] = conntest.Pattern(uint64(r.off+i), r.salt)
	}
	r.off += n
	return n, nil
}

// gatedWriter checks patterned bytes; the first Write after it has taken
// gate bytes says so on at and returns only once pass is closed, holding
// the received bytes WriteTo lent it all the while.
type gatedWriter struct {
	off, gate int
	salt      uint64
	at, pass  chan struct{}
	bad       error
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	if w.at != nil && w.off >= w.gate {
		close(w.at)
		w.at = nil
		<-w.pass
	}
	for i, c := range p {
		if want := conntest.Pattern(uint64(w.off+i), w.salt); c != want && w.bad == nil {
			w.bad = errors.New("byte " + strconv.Itoa(w.off+i) + " wrong")
		}
	}
	w.off += len(p)
	return len(p), nil
}

// A resume while ReadFrom has the send ring lent to its reader and WriteTo
// has received bytes lent to its writer, on the same end, each streaming
// on its own: the reader's bytes go to the new engine, the writer's count
// as read once, and every byte arrives once, both ways.
func TestResumeWhileRingsLent(t *testing.T) {
	rc := resumePipe(t, nil)
	defer rc.close()
	const total, gate = 300 << 10, 60 << 10
	pass := make(chan struct{})
	gr := &gatedReader{total: total, gate: gate, salt: 9, at: make(chan struct{}), pass: pass}
	gw := &gatedWriter{gate: gate, salt: 12, at: make(chan struct{}), pass: pass}
	grAt, gwAt := gr.at, gw.at
	sent := make(chan error, 1)
	go func() {
		_, err := rc.a.ReadFrom(gr)
		if err == nil {
			err = rc.a.CloseWrite()
		}
		sent <- err
	}()
	got := make(chan error, 1)
	go func() {
		_, err := rc.a.WriteTo(gw)
		got <- err
	}()
	// The peer reads the one stream plainly and writes the other.
	read := make(chan error, 1)
	go func() {
		data, err := io.ReadAll(rc.b)
		for i, c := range data {
			if c != conntest.Pattern(uint64(i), 9) && err == nil {
				err = errors.New("byte " + strconv.Itoa(i) + " wrong")
			}
		}
		if err == nil && len(data) != total {
			err = errors.New("read " + strconv.Itoa(len(data)) + " bytes")
		}
		read <- err
	}()
	wrote := make(chan error, 1)
	go func() {
		buf := make([]byte, total)
		for i := range buf {
			buf[i] = conntest.Pattern(uint64(i), 12)
		}
		_, err := rc.b.Write(buf)
		if err == nil {
			err = rc.b.CloseWrite()
		}
		wrote <- err
	}()
	for _, at := range []chan struct{}{grAt, gwAt} {
		select {
		case <-at:
		case <-time.After(conntest.Timeout(t)):
			t.Fatal("a loan never reached its gate")
		}
	}
	failIdle(rc.a)
	conntest.Until(t, "both ends resumed", func() bool { return resumesOf(rc.a) == 1 && resumesOf(rc.b) == 1 })
	close(pass)
	for what, ch := range map[string]chan error{"ReadFrom": sent, "WriteTo": got, "the peer's Read": read, "the peer's Write": wrote} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(conntest.Timeout(t)):
			t.Fatalf("%s never returned", what)
		}
	}
	if gw.bad != nil || gw.off != total {
		t.Fatalf("the writer took %d bytes of %d: %v", gw.off, total, gw.bad)
	}
}

// A Write while the connection waits for a new path takes what the send
// ring has room for and returns, as on a connection whose peer is slow;
// a CloseWrite after it ends the stream after those bytes, and a Write
// after that fails. The peer reads every byte once, then io.EOF.
func TestResumeWriteWhileSuspended(t *testing.T) {
	rc := resumePipe(t, nil)
	defer rc.close()
	hold := make(chan struct{})
	rc.ra.hold = hold
	const before, total = 4 << 10, 10 << 10
	buf := make([]byte, total)
	for i := range buf {
		buf[i] = conntest.Pattern(uint64(i), 10)
	}
	if _, err := rc.a.Write(buf[:before]); err != nil {
		t.Fatal(err)
	}
	failIdle(rc.a)
	rc.ra.waitEntered(t)
	wrote := make(chan error, 1)
	go func() {
		_, err := rc.a.Write(buf[before:])
		wrote <- err
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatalf("Write while suspended: %v", err)
		}
	case <-time.After(conntest.Timeout(t)):
		t.Fatal("a Write that fits the send ring waits while suspended")
	}
	if err := rc.a.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := rc.a.Write([]byte("x")); !errors.Is(err, ring.ErrWriteClosed) {
		t.Fatalf("Write after CloseWrite while suspended: %v", err)
	}
	close(hold)
	got, err := io.ReadAll(rc.b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != total {
		t.Fatalf("read %d bytes, want %d", len(got), total)
	}
	for i, c := range got {
		if c != buf[i] {
			t.Fatalf("byte %d: %#x, want %#x", i, c, buf[i])
		}
	}
}

// removedQP is a queue pair whose device is gone once removed is set: every
// step fails, as verbs calls on a removed device do.
type removedQP struct {
	*simqp.QP
	removed atomic.Bool
}

func (q *removedQP) Step(flags wr.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	if q.removed.Load() {
		return 0, errors.New("test: the device was removed")
	}
	return q.QP.Step(flags, recvs, sends, out, tries)
}

// A removed device: the connection manager reports it, and the queue pair
// refuses even the drain's polls. The connection resumes all the same,
// counting what the drain could not poll as lost, and the peer sends it
// again.
func TestResumeAfterDeviceRemoved(t *testing.T) {
	var removed *removedQP
	rc := resumePipeWrap(t, nil, func(q *simqp.QP) QueuePair {
		removed = &removedQP{QP: q}
		return removed
	})
	defer rc.close()
	const total = 12 << 10
	buf := make([]byte, total)
	for i := range buf {
		buf[i] = conntest.Pattern(uint64(i), 11)
	}
	if _, err := rc.b.Write(buf); err != nil {
		t.Fatal(err)
	}
	removed.QP.Endpoint().FailLosingCompletions(wr.WCGeneralErr)
	removed.removed.Store(true)
	rc.a.TransportFailed(errors.New("test: device removal event"))
	got := make([]byte, 0, total)
	for len(got) < total {
		n, err := rc.a.Read(buf)
		if err != nil {
			t.Fatalf("Read after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
	}
	for i, c := range got {
		if c != conntest.Pattern(uint64(i), 11) {
			t.Fatalf("byte %d: %#x", i, c)
		}
	}
	if s := rc.a.Stats().Resume; s.Resumes[CauseTransport] != 1 {
		t.Fatalf("resumes: %v, want one for the transport's event", s.Resumes)
	}
}
