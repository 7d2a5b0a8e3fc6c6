package rnet

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/stream"
)

// simPath is a fresh queue pair and engine on the simulated fabric, as a
// resume request's handshake builds.
func simPath(t *testing.T) resumedPath {
	t.Helper()
	cfg := ring.Config{RetainUntilReceived: true}
	l := cfg.Layout()
	caps := simfabric.Caps{SendDepth: l.SendDepth, RecvDepth: l.RecvDepth, MaxInline: 256}
	epa, _ := simfabric.New(1, simfabric.Options{}).Pair(caps, caps)
	eng, err := simqp.NewEngine(cfg, epa)
	if err != nil {
		t.Fatal(err)
	}
	return resumedPath{qp: simqp.New(epa, netAddr(simListener), netAddr(simDialer)), eng: eng}
}

// TestResumeListenerHandsOver: at the listener, a resume request's
// handshake takes the connection's Resume call, with its exchange and ring
// configuration, and hands it the new path; a call whose time ran out
// takes none, and a connection that ended, even while a call waits,
// fails both sides.
func TestResumeListenerHandsOver(t *testing.T) {
	lr := newTestResumeListener(t, 4)
	nego, err := lr.begin(true)
	if err != nil || nego.grant == nil {
		t.Fatal(nego, err)
	}
	e := nego.grant.entry // not handed out: no connection calls Resume itself
	waiting := func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.wait != nil
	}
	req := stream.ResumeRequest{Own: resume.Exchange{Received: 7}.Encode(), Ring: ring.Config{RetainUntilReceived: true}}
	type resumed struct {
		qp  stream.QueuePair
		eng *ring.Engine
		err error
	}
	got := make(chan resumed, 1)
	resumeWithin := func(ctx context.Context) {
		go func() {
			qp, eng, err := e.Resume(ctx, req)
			got <- resumed{qp, eng, err}
		}()
		conntest.Until(t, "the Resume call to wait", waiting)
	}
	resumeWithin(t.Context())
	w, err := e.await(t.Context(), errors.New("the dialer resumed"))
	if err != nil || w.req != req {
		t.Fatalf("await: %+v, %v; want the Resume call's request", w, err)
	}
	p := simPath(t)
	if !e.hand(w, p, 2) {
		t.Fatal("hand: the Resume call is not waiting")
	}
	if r := <-got; r.err != nil || r.qp != p.qp || r.eng != p.eng {
		t.Fatalf("Resume returned %v, %v, %v; want the handed path", r.qp, r.eng, r.err)
	}

	// A Resume call whose time runs out takes no path.
	ctx, cancel := context.WithCancel(t.Context())
	resumeWithin(ctx)
	if w, err = e.await(t.Context(), errors.New("the dialer resumed")); err != nil {
		t.Fatal(err)
	}
	cancel()
	if r := <-got; r.err == nil || !strings.Contains(r.err.Error(), "did not resume") {
		t.Fatalf("Resume past its time: %v, want an error", r.err)
	}
	if e.hand(w, simPath(t), 3) {
		t.Error("a path handed to a Resume call that gave up")
	}
	if _, err := e.await(t.Context(), nil); err == nil {
		t.Error("await took a connection not handed out, with no Resume call")
	}

	// The connection ends while a Resume call waits: the call returns at
	// once, and every later one and the handshakes fail; the table forgets
	// the connection.
	resumeWithin(t.Context())
	e.Forget()
	if r := <-got; !errors.Is(r.err, errResumeEnded) {
		t.Errorf("Resume waiting as the connection ended: %v, want errResumeEnded", r.err)
	}
	if _, err := e.await(t.Context(), nil); !errors.Is(err, errResumeEnded) {
		t.Errorf("await after Forget: %v", err)
	}
	if _, _, err := e.Resume(t.Context(), req); !errors.Is(err, errResumeEnded) {
		t.Errorf("Resume after Forget: %v", err)
	}
	if n := lr.table.Len(); n != 0 {
		t.Errorf("table holds %d connections after Forget", n)
	}
}

// TestResumeRequestFailsHealthyPath: a resume request for a connection
// whose path still looks healthy at the listener tells the connection that
// its path failed; the connection then asks its resumer for a new queue
// pair with its exchange and a retaining ring configuration, and, with no
// path handed over within its ResumeTimeout, fails saying so.
func TestResumeRequestFailsHealthyPath(t *testing.T) {
	lr := newTestResumeListener(t, 4)
	lset := resumeSettings(true)
	lset.resumeTimeout = 300 * time.Millisecond
	h, err := simNegotiate(resumeSettings(true), lset, lr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBoth(t, h)
	roundTrip(t, h.dialer, h.listener, 1000)
	w, err := h.grant.entry.await(t.Context(), errors.New("the dialer resumed"))
	if err != nil {
		t.Fatalf("await: %v", err)
	}
	ex, err := resume.ParseExchange(w.req.Own[:])
	if err != nil || ex.Received != 1000 || !w.req.Ring.RetainUntilReceived {
		t.Fatalf("the connection's request: exchange %+v, %v, ring %+v; want 1000 bytes received, retaining", ex, err, w.req.Ring)
	}
	_, err = h.listener.Read(make([]byte, 1))
	if err == nil || !strings.Contains(err.Error(), "the dialer resumed") || !strings.Contains(err.Error(), "resuming it failed") {
		t.Errorf("Read after the resume's time: %v; want the resume's failure", err)
	}
}

// TestResumeTokenForgottenOnPeerClose: a connection whose dialer closes it
// (a graceful DISCONNECT) leaves the listener's table at once, before the
// listening end is closed: a resume could otherwise revive a connection
// its peer ended.
func TestResumeTokenForgottenOnPeerClose(t *testing.T) {
	lr := newTestResumeListener(t, 4)
	h, err := simNegotiate(resumeSettings(true), resumeSettings(true), lr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.listener.Close()
	roundTrip(t, h.dialer, h.listener, 1000)
	if err := h.dialer.Close(); err != nil {
		t.Fatal(err)
	}
	conntest.Until(t, "the listener to forget the token of a connection its peer closed", func() bool { return lr.table.Len() == 0 })
}

// A connection that resumes probes its path at least every third of
// ResumeTimeout, never more often than the least KeepAlive, and keepalives
// turned off stay off.
func TestResumeKeepAlive(t *testing.T) {
	for _, tc := range []struct{ keepAlive, resumeTimeout, want time.Duration }{
		{15 * time.Second, 5 * time.Second, 5 * time.Second / 3},
		{time.Second, 5 * time.Second, time.Second},
		{15 * time.Second, 100 * time.Millisecond, minKeepAlive},
		{15 * time.Second, time.Minute, 15 * time.Second},
		{-1, 5 * time.Second, -1},
	} {
		if got := resumeKeepAlive(tc.keepAlive, tc.resumeTimeout); got != tc.want {
			t.Errorf("resumeKeepAlive(%v, %v) = %v, want %v", tc.keepAlive, tc.resumeTimeout, got, tc.want)
		}
	}
}
