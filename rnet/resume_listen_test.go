package rnet

import (
	"context"
	"errors"
	"strings"
	"testing"

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
// handshake waits for the connection's Resume call, takes its exchange and
// ring configuration, and hands it the new path; a call whose time ran
// out takes none, and a connection that ended fails both sides.
func TestResumeListenerHandsOver(t *testing.T) {
	lr := newTestResumeListener(t, 4)
	h, err := simNegotiate(resumeSettings(true), resumeSettings(true), lr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBoth(t, h)
	e := h.grant.entry

	type waited struct {
		w   *resumeWait
		err error
	}
	awaited := make(chan waited, 1)
	go func() {
		w, err := e.await(t.Context(), errors.New("the dialer resumed"))
		awaited <- waited{w, err}
	}()
	req := stream.ResumeRequest{Own: resume.Exchange{Received: 7}.Encode(), Ring: ring.Config{RetainUntilReceived: true}}
	type resumed struct {
		qp  stream.QueuePair
		eng *ring.Engine
		err error
	}
	got := make(chan resumed, 1)
	go func() {
		qp, eng, err := e.Resume(t.Context(), req)
		got <- resumed{qp, eng, err}
	}()
	aw := <-awaited
	if aw.err != nil || aw.w.req != req {
		t.Fatalf("await: %+v, %v; want the Resume call's request", aw.w, aw.err)
	}
	p := simPath(t)
	if !e.hand(aw.w, p, 2) {
		t.Fatal("hand: the Resume call is not waiting")
	}
	if r := <-got; r.err != nil || r.qp != p.qp || r.eng != p.eng {
		t.Fatalf("Resume returned %v, %v, %v; want the handed path", r.qp, r.eng, r.err)
	}

	// A Resume call whose time runs out takes no path.
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		qp, eng, err := e.Resume(ctx, req)
		got <- resumed{qp, eng, err}
	}()
	aw = waited{}
	aw.w, aw.err = e.await(t.Context(), errors.New("the dialer resumed"))
	if aw.err != nil {
		t.Fatal(aw.err)
	}
	cancel()
	if r := <-got; r.err == nil || !strings.Contains(r.err.Error(), "did not resume") {
		t.Fatalf("Resume past its time: %v, want an error", r.err)
	}
	if e.hand(aw.w, simPath(t), 3) {
		t.Error("a path handed to a Resume call that gave up")
	}

	// The connection ends: both sides fail, and the table forgets it.
	e.Forget()
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
