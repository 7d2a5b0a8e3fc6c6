package stream

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/wr"
)

// A connection whose path fails mid-stream, both ways streaming, resumes
// on a new queue pair: every byte arrives once and in order, each side
// resumed once, and Close tells each resumer to forget the connection and
// leaves no goroutine behind. The path fails as a device error does (the
// oldest send in flight lost), as a removed device does (the completions
// not yet polled lost too), and as a cut wire does (every send fails once
// its retries run out).
func TestResumeAfterPathFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(q *simqp.QP)
	}{
		{"Fail", func(q *simqp.QP) { q.Endpoint().Fail(wr.WCRetryExcErr) }},
		{"FailLosingCompletions", func(q *simqp.QP) { q.Endpoint().FailLosingCompletions(wr.WCGeneralErr) }},
		{"Cut", func(q *simqp.QP) { q.Endpoint().Cut() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			rc := resumePipe(t, nil)
			const total = 400 << 10
			ab := startChecked(rc.a, rc.b, total, 1, total/3)
			ba := startChecked(rc.b, rc.a, total, 2, total/3)
			gate(t, ab, ba)
			tc.fail(endpointOf(rc.a))
			rc.a.Drive() // as the tick would
			pass(ab, ba)
			ab.wait(t)
			ba.wait(t)
			for _, c := range []*Conn{rc.a, rc.b} {
				if n := resumesOf(c); n != 1 {
					t.Errorf("%v resumed %d times, want 1", c.LocalAddr(), n)
				}
			}
			if rc.ra.calls.Load() != 1 || rc.rb.calls.Load() != 1 {
				t.Errorf("Resume called %d and %d times, want once each", rc.ra.calls.Load(), rc.rb.calls.Load())
			}
			t.Logf("resent %d and %d bytes", rc.a.Stats().Resume.BytesResent, rc.b.Stats().Resume.BytesResent)
			rc.close()
			if rc.ra.forgets.Load() != 1 || rc.rb.forgets.Load() != 1 {
				t.Errorf("Forget called %d and %d times, want once each", rc.ra.forgets.Load(), rc.rb.forgets.Load())
			}
			goroutinesBack(t, base)
		})
	}
}

// One connection resumes three times in a row, its path failing on either
// side, while it streams both ways.
func TestResumeRepeatedly(t *testing.T) {
	rc := resumePipe(t, nil)
	defer rc.close()
	const total = 600 << 10
	gates := []int{total / 4, total / 2, 3 * total / 4}
	ab := startChecked(rc.a, rc.b, total, 3, gates...)
	ba := startChecked(rc.b, rc.a, total, 4, gates...)
	for i := 1; i <= len(gates); i++ {
		gate(t, ab, ba)
		victim := rc.a
		if i == 2 {
			victim = rc.b
		}
		failIdle(victim)
		conntest.Until(t, "both ends resumed", func() bool {
			return resumesOf(rc.a) == uint64(i) && resumesOf(rc.b) == uint64(i)
		})
		pass(ab, ba)
	}
	ab.wait(t)
	ba.wait(t)
	if s := rc.a.Stats().Resume; s.TotalTook < s.LastTook || s.LastTook <= 0 {
		t.Errorf("resume times: last %v, total %v", s.LastTook, s.TotalTook)
	}
}

// A half-closed stream resumes with its end: the peer reads every byte,
// then io.EOF, whether CloseWrite came before the path failed or while the
// connection waited for a new one.
func TestResumeCloseWrite(t *testing.T) {
	for _, during := range []bool{false, true} {
		name := "before"
		if during {
			name = "during"
		}
		t.Run(name, func(t *testing.T) {
			rc := resumePipe(t, nil)
			defer rc.close()
			hold := make(chan struct{})
			rc.ra.hold = hold
			const total = 12 << 10 // fits the send ring: all of it held
			buf := make([]byte, total)
			for i := range buf {
				buf[i] = conntest.Pattern(uint64(i), 5)
			}
			if _, err := rc.a.Write(buf); err != nil {
				t.Fatal(err)
			}
			if !during {
				if err := rc.a.CloseWrite(); err != nil {
					t.Fatal(err)
				}
			}
			failIdle(rc.a)
			rc.ra.waitEntered(t)
			if during {
				if err := rc.a.CloseWrite(); err != nil {
					t.Fatal(err)
				}
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
				if c != conntest.Pattern(uint64(i), 5) {
					t.Fatalf("byte %d: %#x", i, c)
				}
			}
			if n, err := rc.b.Read(buf); n != 0 || err != io.EOF {
				t.Fatalf("Read after EOF = %d, %v", n, err)
			}
			// The other way still works.
			if _, err := rc.b.Write([]byte("still here")); err != nil {
				t.Fatal(err)
			}
			n, err := rc.a.Read(buf)
			if err != nil || string(buf[:n]) != "still here" {
				t.Fatalf("Read the other way = %q, %v", buf[:n], err)
			}
			if resumesOf(rc.a) != 1 || resumesOf(rc.b) != 1 {
				t.Fatalf("resumes %d and %d, want 1 each", resumesOf(rc.a), resumesOf(rc.b))
			}
		})
	}
}

// A Read deadline that passes while the connection waits for a new path
// fails that Read with os.ErrDeadlineExceeded; the bytes received before
// the failure are read first, and the connection resumes afterwards.
func TestResumeReadDeadlineWhileSuspended(t *testing.T) {
	rc := resumePipe(t, nil)
	defer rc.close()
	hold := make(chan struct{})
	rc.ra.hold = hold
	if _, err := rc.b.Write([]byte("early")); err != nil {
		t.Fatal(err)
	}
	conntest.Until(t, "the early bytes to arrive", func() bool {
		rc.a.Drive()
		rc.a.mu.Lock()
		defer rc.a.mu.Unlock()
		return rc.a.eng.ReadableBytes() == 5
	})
	failIdle(rc.a)
	rc.ra.waitEntered(t)
	buf := make([]byte, 64)
	if n, err := rc.a.Read(buf); err != nil || string(buf[:n]) != "early" {
		t.Fatalf("Read while suspended = %q, %v; want the early bytes", buf[:n], err)
	}
	rc.a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := rc.a.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline while suspended: %v", err)
	}
	rc.a.SetReadDeadline(time.Time{})
	close(hold)
	if _, err := rc.b.Write([]byte("late")); err != nil {
		t.Fatal(err)
	}
	if n, err := rc.a.Read(buf); err != nil || string(buf[:n]) != "late" {
		t.Fatalf("Read after the resume = %q, %v", buf[:n], err)
	}
	if resumesOf(rc.a) != 1 {
		t.Fatal("not resumed")
	}
}

// A resume that finds no path within ResumeTimeout fails the connection
// with an error that wraps the path's failure and says what the resume
// met and how long it had, its whole ResumeTimeout; the resumer is told to
// forget the connection, once, and Close leaves no goroutine behind.
func TestResumeGivesUp(t *testing.T) {
	base := runtime.NumGoroutine()
	const timeout = 50 * time.Millisecond
	rc := resumePipe(t, func(s *Settings) { s.ResumeTimeout = timeout })
	rc.ra.hold = make(chan struct{}) // never a path
	rc.rb.hold = rc.ra.hold
	failIdle(rc.a)
	_, err := rc.a.Read(make([]byte, 10))
	var re *ResumeError
	if !errors.As(err, &re) {
		t.Fatalf("Read = %v, want a ResumeError", err)
	}
	var ce *ring.CompletionError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "resuming it failed") || !strings.Contains(err.Error(), "ResumeTimeout") {
		t.Fatalf("Read = %v: want the path's failed completion and the resume's timeout", err)
	}
	if !strings.Contains(err.Error(), "test resumer: no path") {
		t.Errorf("Read = %v: want what the resumer met", err)
	}
	if re.Took < timeout {
		t.Errorf("the resume gave up after %v, before its ResumeTimeout of %v", re.Took, timeout)
	}
	if _, err := rc.a.Write([]byte("x")); !errors.As(err, &re) {
		t.Fatalf("Write = %v, want the ResumeError", err)
	}
	conntest.Until(t, "Forget", func() bool { return rc.ra.forgets.Load() == 1 })
	rc.close()
	if rc.ra.forgets.Load() != 1 || rc.rb.forgets.Load() != 1 {
		t.Errorf("Forget called %d and %d times, want once each", rc.ra.forgets.Load(), rc.rb.forgets.Load())
	}
	if rc.a.Stats().Resume.Failed != 1 {
		t.Errorf("failed resumes: %d", rc.a.Stats().Resume.Failed)
	}
	goroutinesBack(t, base)
}

// Close while the connection waits for a new path that does not come
// waits for it no longer than its Linger, then ends the resume, tells the
// resumer to forget once, and leaves no goroutine behind.
func TestResumeCloseWhileSuspended(t *testing.T) {
	base := runtime.NumGoroutine()
	rc := resumePipe(t, func(s *Settings) { s.Linger = 50 * time.Millisecond })
	rc.ra.hold = make(chan struct{})
	rc.rb.hold = rc.ra.hold
	if _, err := rc.a.Write(make([]byte, 10<<10)); err != nil {
		t.Fatal(err)
	}
	failIdle(rc.a)
	rc.ra.waitEntered(t)
	rc.rb.waitEntered(t) // the peer heard of it too
	read := make(chan error, 1)
	go func() {
		_, err := rc.a.Read(make([]byte, 10))
		read <- err
	}()
	closed := make(chan error, 1)
	go func() { closed <- rc.a.Close() }()
	select {
	case err := <-closed:
		// As when Linger drops what was written: the peer may lack it.
		errorIs(t, "Close past its Linger while suspended", err, ring.ErrAborted)
	case <-time.After(conntest.Timeout(t)):
		t.Fatal("Close while suspended does not return after its Linger")
	}
	errorIs(t, "a Read blocked across Close", <-read, net.ErrClosed)
	if n := rc.ra.forgets.Load(); n != 1 {
		t.Errorf("Forget called %d times, want once", n)
	}
	rc.b.Close()
	rc.a.Close()
	if n := rc.ra.forgets.Load(); n != 1 {
		t.Errorf("Forget called %d times after a second Close, want once", n)
	}
	goroutinesBack(t, base)
}

// Close while the connection waits for a new path lingers: once the path
// comes, the bytes written before Close and the end of the stream reach
// the peer, which reads every byte and then io.EOF, as after a TCP close
// whose FIN was retransmitted.
func TestResumeCloseLingersThroughTheResume(t *testing.T) {
	base := runtime.NumGoroutine()
	rc := resumePipe(t, nil)
	rc.ra.hold = make(chan struct{}) // the dialer finds no path until released
	const total = 12 << 10
	buf := make([]byte, total)
	for i := range buf {
		buf[i] = conntest.Pattern(uint64(i), 20)
	}
	if _, err := rc.b.Write(buf); err != nil {
		t.Fatal(err)
	}
	failIdle(rc.b)
	rc.rb.waitEntered(t)
	closed := make(chan error, 1)
	go func() { closed <- rc.b.Close() }()
	rc.ra.waitEntered(t) // the dialer heard of it too, and waits for a path
	close(rc.ra.hold)
	got, err := io.ReadAll(rc.a)
	if err != nil || !bytes.Equal(got, buf) {
		t.Fatalf("ReadAll across the resume of a closed peer: %d bytes, %v; want all %d and io.EOF", len(got), err, total)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close = %v", err)
		}
	case <-time.After(conntest.Timeout(t)):
		t.Fatal("Close does not return once the resume has delivered its bytes")
	}
	if a, b := resumesOf(rc.a), resumesOf(rc.b); a != 1 || b != 1 {
		t.Errorf("resumes: dialer %d, listener %d; want 1 each", a, b)
	}
	rc.a.Close()
	goroutinesBack(t, base)
}

// The peer's DISCONNECT ends the connection as before: nothing resumes.
func TestResumeNotAfterPeerDisconnect(t *testing.T) {
	rc := resumePipe(t, nil)
	defer rc.close()
	if _, err := rc.b.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	rc.b.Close()
	got, err := io.ReadAll(rc.a)
	if err != nil || string(got) != "bye" {
		t.Fatalf("ReadAll = %q, %v", got, err)
	}
	rc.a.Close()
	if rc.ra.calls.Load() != 0 || rc.rb.calls.Load() != 0 {
		t.Fatalf("Resume called %d and %d times after an orderly close", rc.ra.calls.Load(), rc.rb.calls.Load())
	}
}

// A peer that breaks the protocol ends the connection: its error is not the
// path's, and nothing resumes.
func TestResumeNotAfterProtocolError(t *testing.T) {
	rc := resumePipe(t, nil)
	defer rc.close()
	// b's queue pair sends a's a message of a reserved opcode, unsignalled
	// so that b's engine never sees its completion.
	bad := []wr.Send{{Op: wr.OpWriteImm, Imm: uint32(ring.MakeMsg(ring.MsgRsvd, 0)), Inline: true}}
	if err := endpointOf(rc.b).Endpoint().PostSend(bad); err != nil {
		t.Fatal(err)
	}
	_, err := rc.a.Read(make([]byte, 10))
	errorIs(t, "Read after a reserved opcode", err, ring.ErrProtocol)
	conntest.Until(t, "Forget", func() bool { return rc.ra.forgets.Load() == 1 })
	if n := rc.ra.calls.Load(); n != 0 {
		t.Fatalf("Resume called %d times after a protocol error", n)
	}
}

// A peer whose exchange counts more bytes than were ever sent to it fails
// the resume with resume.ErrCountOutOfRange: the stream cannot go on
// without a gap.
func TestResumeCountOutOfRange(t *testing.T) {
	rc := resumePipe(t, nil)
	defer rc.close()
	rc.meet.own = func(side int, own [ring.ExchangeSize]byte) [ring.ExchangeSize]byte {
		if side == 1 {
			ex, _ := resume.ParseExchange(own[:])
			ex.Received += 1 << 30
			return ex.Encode()
		}
		return own
	}
	if _, err := rc.a.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	endpointOf(rc.a).Endpoint().Fail(wr.WCRetryExcErr)
	var err error
	for err == nil {
		_, err = rc.a.Read(make([]byte, 10))
	}
	errorIs(t, "Read after an exchange out of range", err, resume.ErrCountOutOfRange)
	var re *ResumeError
	if !errors.As(err, &re) {
		t.Fatalf("Read = %v, want a ResumeError", err)
	}
}

// failIdle fails c's queue pair as a device error does, and steps c, as
// its next call or tick would, so that it sees the failure now.
func failIdle(c *Conn) {
	endpointOf(c).Endpoint().Fail(wr.WCRetryExcErr)
	c.Drive()
}

// Bytes whose receive completions the device lost with it are sent again:
// the exchange of the side that lost them counts them as not received, the
// peer still holds them, and the reader gets each byte once.
func TestResumeResendsWhatWasLost(t *testing.T) {
	rc := resumePipe(t, nil)
	defer rc.close()
	const total = 12 << 10
	buf := make([]byte, total)
	for i := range buf {
		buf[i] = conntest.Pattern(uint64(i), 6)
	}
	if _, err := rc.b.Write(buf); err != nil {
		t.Fatal(err)
	}
	// Nothing steps a meanwhile: its receive completions wait in its CQ,
	// and go with the device.
	if lost := endpointOf(rc.a).Endpoint().FailLosingCompletions(wr.WCGeneralErr); lost == 0 {
		t.Fatal("no completion lost: the test tests nothing")
	}
	rc.a.Drive()
	got := make([]byte, 0, total)
	for len(got) < total {
		n, err := rc.a.Read(buf)
		if err != nil {
			t.Fatalf("Read after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
	}
	for i, c := range got {
		if c != conntest.Pattern(uint64(i), 6) {
			t.Fatalf("byte %d: %#x", i, c)
		}
	}
	if s := rc.b.Stats().Resume; s.BytesResent != total {
		t.Fatalf("the writer resent %d bytes, want %d", s.BytesResent, total)
	}
	if s := rc.a.Stats().Resume; s.Resumes[CauseCompletion] != 1 {
		t.Fatalf("the reader's resumes: %v, want one for a completion error", s.Resumes)
	}
	if n := resumesOf(rc.b); n != 1 {
		t.Fatalf("the writer resumed %d times, want once", n)
	}
}

// A path that goes silent (the device retries without limit, as rxe does
// with retry count 7, so no completion ever fails) is found by the
// keepalive, and the connection resumes: the side whose keepalive found it
// for that cause, its peer for the transport's event (the first side's
// disconnect of its old queue pair) or a send that queue pair refused.
func TestResumeAfterKeepaliveFindsPathSilent(t *testing.T) {
	ahead := fakeKeepaliveClock(t)
	const period = time.Hour // the real timer never fires in the test
	var hold *holdQP
	rc := resumePipeWrap(t, func(s *Settings) { s.KeepAlive = period }, func(q *simqp.QP) QueuePair {
		hold = &holdQP{QP: q}
		return hold
	})
	defer rc.close()
	conntest.Until(t, "nothing in flight", func() bool {
		rc.a.mu.Lock()
		defer rc.a.mu.Unlock()
		rc.a.driveLocked()
		return rc.a.eng.InFlight() == 0
	})
	hold.silence()
	rc.a.tick()
	silent := []byte("into the silence")
	if _, err := rc.a.Write(silent); err != nil {
		t.Fatal(err)
	}
	ahead(keepaliveProbes*period + time.Second)
	rc.a.tick()
	ahead(period)
	rc.a.tick()
	rc.ra.waitEntered(t)

	buf := make([]byte, len(silent))
	if _, err := io.ReadFull(rc.b, buf); err != nil || string(buf) != string(silent) {
		t.Fatalf("ReadFull = %q, %v", buf, err)
	}
	const total = 200 << 10
	ab := startChecked(rc.a, rc.b, total, 7)
	ba := startChecked(rc.b, rc.a, total, 8)
	ab.wait(t)
	ba.wait(t)
	if s := rc.a.Stats().Resume; s.Resumes[CauseKeepalive] != 1 {
		t.Errorf("resumes of the side whose keepalive found the silence: %v", s.Resumes)
	}
	// The peer hears of it from the transport, or from its own send that
	// the disconnected queue pair did not take, whichever comes first.
	if s := rc.b.Stats().Resume; s.Resumes[CauseTransport]+s.Resumes[CauseCompletion] != 1 {
		t.Errorf("resumes of its peer: %v", s.Resumes)
	}
}
