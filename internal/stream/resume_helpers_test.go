package stream

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simqp"
)

// A resumer for tests: the two ends of a connection each have one, and
// their Resume calls meet, as a dialer's reconnect meets the listener's
// wait, on a fresh simulated fabric.

// resumeMeet is where the two ends' Resume calls meet.
type resumeMeet struct {
	mu      sync.Mutex
	waiting [2]*resumeArrival
	// own, if set before any resume, changes the exchange side i sends.
	own func(side int, own [ring.ExchangeSize]byte) [ring.ExchangeSize]byte
}

type resumeArrival struct {
	req   ResumeRequest
	reply chan resumeResult
}

type resumeResult struct {
	qp  QueuePair
	eng *ring.Engine
	err error
}

// testResumer is one end's Resumer.
type testResumer struct {
	meet *resumeMeet
	side int // 0: the dialer's, 1: the listener's
	// hold, if not nil, keeps Resume from meeting until it is closed.
	hold chan struct{}
	// entered receives each request, as Resume begins.
	entered chan ResumeRequest
	// wrapNew, if not nil, wraps each new queue pair Resume returns.
	wrapNew func(QueuePair) QueuePair
	// silentFirst keeps the first new path this side meets from its
	// connection, as a listener whose RTU was lost does, until the other
	// side's next Resume meets this one again; it then releases it.
	silentFirst atomic.Bool
	// exchangeWait is the ExchangeWait this side's resumer asks for on
	// the first new path; the later ones wait for all of the time, so that
	// a slow machine cannot fail them too.
	exchangeWait time.Duration
	waitAsked    atomic.Bool
	calls        atomic.Int32
	forgets      atomic.Int32
	// newPathErrs are the NewPathErr of each call, in order.
	newPathErrsMu sync.Mutex
	newPathErrs   []error
}

func (r *testResumer) Resume(ctx context.Context, req ResumeRequest) (QueuePair, *ring.Engine, error) {
	r.calls.Add(1)
	r.newPathErrsMu.Lock()
	r.newPathErrs = append(r.newPathErrs, req.NewPathErr)
	r.newPathErrsMu.Unlock()
	select {
	case r.entered <- req:
	default:
	}
	if r.hold != nil {
		select {
		case <-r.hold:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("test resumer: no path: %w", ctx.Err())
		}
	}
	qp, eng, err := r.meet.arrive(ctx, r.side, req)
	if err == nil && r.silentFirst.Swap(false) {
		silent := qp
		qp, eng, err = r.meet.arrive(ctx, r.side, req)
		silent.Disconnect() // never started: nothing listens for its events
		silent.Destroy()
	}
	if err == nil && r.wrapNew != nil {
		qp = r.wrapNew(qp)
	}
	return qp, eng, err
}

func (r *testResumer) Forget() { r.forgets.Add(1) }

func (r *testResumer) ExchangeWait(time.Duration) time.Duration {
	if r.waitAsked.Swap(true) {
		return 0
	}
	return r.exchangeWait
}

// waitEntered waits until Resume has begun.
func (r *testResumer) waitEntered(t testing.TB) ResumeRequest {
	t.Helper()
	select {
	case req := <-r.entered:
		return req
	case <-time.After(conntest.Timeout(t)):
		t.Fatalf("side %d never began to resume", r.side)
		return ResumeRequest{}
	}
}

// arrive waits for the other side's Resume, or ctx; the second to come
// makes the new pair and hands each side its end.
func (m *resumeMeet) arrive(ctx context.Context, side int, req ResumeRequest) (QueuePair, *ring.Engine, error) {
	a := &resumeArrival{req: req, reply: make(chan resumeResult, 1)}
	m.mu.Lock()
	if other := m.waiting[1-side]; other != nil {
		m.waiting = [2]*resumeArrival{}
		arrivals := [2]*resumeArrival{}
		arrivals[side], arrivals[1-side] = a, other
		own := [2][ring.ExchangeSize]byte{arrivals[0].req.Own, arrivals[1].req.Own}
		if m.own != nil {
			own[0], own[1] = m.own(0, own[0]), m.own(1, own[1])
		}
		ea, eb, err := simqp.ResumedPair(arrivals[0].req.Ring, arrivals[1].req.Ring, own[0], own[1], clientAddr, serverAddr)
		if err != nil {
			arrivals[0].reply <- resumeResult{err: err}
			arrivals[1].reply <- resumeResult{err: err}
		} else {
			arrivals[0].reply <- resumeResult{qp: ea.QP, eng: ea.Engine}
			arrivals[1].reply <- resumeResult{qp: eb.QP, eng: eb.Engine}
		}
	} else {
		m.waiting[side] = a
	}
	m.mu.Unlock()
	select {
	case r := <-a.reply:
		return r.qp, r.eng, r.err
	case <-ctx.Done():
	}
	m.mu.Lock()
	if m.waiting[side] == a {
		m.waiting[side] = nil
		m.mu.Unlock()
		return nil, nil, fmt.Errorf("test resumer: the peer never came: %w", ctx.Err())
	}
	m.mu.Unlock()
	r := <-a.reply // met just now
	return r.qp, r.eng, r.err
}

// resumeConns is a connection whose two ends resume.
type resumeConns struct {
	a, b   *Conn // the dialer's end and the listener's
	ra, rb *testResumer
	meet   *resumeMeet
}

// resumePipe returns two connected Conns over a fresh simulated fabric that
// keep their sent bytes and resume through a resumeMeet, with small rings
// so that a stream of a few hundred KiB is many rings' worth; mod, if not
// nil, changes the settings after that.
func resumePipe(tb testing.TB, mod func(*Settings)) *resumeConns {
	tb.Helper()
	return resumePipeWrap(tb, mod, nil)
}

// resumePipeWrap is resumePipe with the dialer's first queue pair wrapped
// by wrap, if not nil.
func resumePipeWrap(tb testing.TB, mod func(*Settings), wrap func(*simqp.QP) QueuePair) *resumeConns {
	tb.Helper()
	set := testSettings(func(s *Settings) {
		s.Ring.RetainUntilReceived = true
		s.Ring.SendBufferSize = 16 << 10
		s.Ring.RecvBufferSize = 16 << 10
		s.ResumeTimeout = conntest.Bound
		if mod != nil {
			mod(s)
		}
	})
	a, b, err := simqp.Pair(set.Ring, clientAddr, serverAddr)
	if err != nil {
		tb.Fatal(err)
	}
	rc := &resumeConns{meet: &resumeMeet{}}
	rc.ra = &testResumer{meet: rc.meet, side: 0, entered: make(chan ResumeRequest, 8)}
	rc.rb = &testResumer{meet: rc.meet, side: 1, entered: make(chan ResumeRequest, 8)}
	sa, sb := set, set
	sa.Resumer, sb.Resumer = rc.ra, rc.rb
	var qa QueuePair = a.QP
	if wrap != nil {
		qa = wrap(a.QP)
	}
	rc.a, rc.b = Start(qa, a.Engine, sa), Start(b.QP, b.Engine, sb)
	return rc
}

// close closes both ends.
func (rc *resumeConns) close() {
	rc.a.Close()
	rc.b.Close()
}

// endpointOf returns the simulated queue pair c runs over now.
func endpointOf(c *Conn) *simqp.QP { return c.QueuePair().(*simqp.QP) }

// resumesOf is how many resumes c completed.
func resumesOf(c *Conn) (n uint64) {
	for _, k := range c.Stats().Resume.Resumes {
		n += k
	}
	return n
}

// checkedStream writes total patterned bytes on w and reads them on r,
// checking each, in the background. At each of its gates the writer stops
// once it has written that many bytes, and the reader once it has read
// that many less gateLag, each saying so on atGate and going on when pass
// receives: a test fails the path there, with bytes in flight or unread.
type checkedStream struct {
	read   atomic.Int64
	atGate chan struct{}
	pass   chan struct{}
	done   chan error
}

// gateLag is how far the reader stays behind the writer at a gate: bytes
// the writer holds, unread at the peer.
const gateLag = 6 << 10

func startChecked(w, r *Conn, total int, salt uint64, gates ...int) *checkedStream {
	s := &checkedStream{atGate: make(chan struct{}, 2), pass: make(chan struct{}, 2), done: make(chan error, 2)}
	go func() {
		buf := make([]byte, 5000)
		next := 0
		for off := 0; off < total; {
			if next < len(gates) && off == gates[next] {
				next++
				s.atGate <- struct{}{}
				<-s.pass
			}
			n := min(len(buf), total-off)
			if next < len(gates) {
				n = min(n, gates[next]-off)
			}
			for i := range buf[:n] {
				buf[i] = conntest.Pattern(uint64(off+i), salt)
			}
			if _, err := w.Write(buf[:n]); err != nil {
				s.done <- fmt.Errorf("write at %d of %d: %w", off, total, err)
				return
			}
			off += n
		}
		s.done <- nil
	}()
	go func() {
		buf := make([]byte, 7000)
		next := 0
		for off := 0; off < total; {
			if next < len(gates) && off == gates[next]-gateLag {
				next++
				s.atGate <- struct{}{}
				<-s.pass
			}
			want := len(buf)
			if next < len(gates) {
				want = min(want, gates[next]-gateLag-off)
			}
			n, err := r.Read(buf[:want])
			for i, c := range buf[:n] {
				if want := conntest.Pattern(uint64(off+i), salt); c != want {
					s.done <- fmt.Errorf("byte %d: got %#x, want %#x", off+i, c, want)
					return
				}
			}
			off += n
			s.read.Store(int64(off))
			if err != nil {
				s.done <- fmt.Errorf("read at %d of %d: %w", off, total, err)
				return
			}
		}
		s.done <- nil
	}()
	return s
}

// gate waits until the writer and the reader of each stream have reached
// their next gate.
func gate(t testing.TB, streams ...*checkedStream) {
	t.Helper()
	timeout := time.NewTimer(conntest.Timeout(t))
	defer timeout.Stop()
	for _, s := range streams {
		for range 2 {
			select {
			case <-s.atGate:
			case <-timeout.C:
				t.Fatalf("a stream never reached its gate: %d bytes read", s.read.Load())
			}
		}
	}
}

// pass lets the writer and the reader of each stream go on from their gate.
func pass(streams ...*checkedStream) {
	for _, s := range streams {
		s.pass <- struct{}{}
		s.pass <- struct{}{}
	}
}

// wait waits for the writer and the reader to finish, and fails the test
// with the first error.
func (s *checkedStream) wait(t testing.TB) {
	t.Helper()
	timeout := time.NewTimer(conntest.Timeout(t))
	defer timeout.Stop()
	for range 2 {
		select {
		case err := <-s.done:
			if err != nil {
				t.Fatal(err)
			}
		case <-timeout.C:
			t.Fatalf("stream not done after %v: %d bytes read", conntest.Timeout(t), s.read.Load())
		}
	}
}

// goroutinesBack waits until no more goroutines run than base.
func goroutinesBack(t testing.TB, base int) {
	t.Helper()
	conntest.Until(t, fmt.Sprintf("goroutines back to %d", base), func() bool { return runtime.NumGoroutine() <= base })
}

// errorIs fails the test unless errors.Is(err, target).
func errorIs(t testing.TB, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: %v, want %v", what, err, target)
	}
}
