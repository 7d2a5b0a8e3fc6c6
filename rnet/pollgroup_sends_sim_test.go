package rnet

import (
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/pollgroup"
	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// TestSimPollGroupCorkBehindParkedReader: a Read parks as its poll group's
// leader with the CQ's send half unarmed (it needs only the peer's
// messages); a Write then corks behind a transfer whose completion is
// already in the CQ. The corked bytes need that completion, which left no
// event: the leader must still be woken to take it and let them go, or
// the peer waits for bytes that never come.
func TestSimPollGroupCorkBehindParkedReader(t *testing.T) {
	sn := simGroupPipes(t, 1, simGroupOptions{armedCQ: true, reapDelay: time.Hour})
	defer sn.closeAll()
	client, server := sn.clients[0], sn.servers[0]
	// The premise: once the Read is parked, a poll that arms the send half
	// hands out a completion (the first Write's), for the corked bytes.
	var armedAndFound atomic.Bool
	t.Cleanup(pollgroup.SetTestHooks(&pollgroup.Hooks{
		Polled: func(_ *pollgroup.Group, flags verbs.StepFlags, found []wr.Completion) {
			if flags&verbs.StepArmSend != 0 && len(found) > 0 {
				armedAndFound.Store(true)
			}
		},
	}))

	reply := make(chan error, 1)
	go func() {
		buf := make([]byte, 5)
		_, err := io.ReadFull(client, buf)
		if err == nil && string(buf) != "reply" {
			err = io.ErrUnexpectedEOF
		}
		reply <- err
	}()
	conntest.Until(t, "the client's Read to park as its group's leader", func() bool {
		for _, st := range procstat.Stacks() {
			if strings.Contains(st, "pollgroup.(*Member).lead") && strings.Contains(st, "WaitReady") {
				return true
			}
		}
		return false
	})
	for _, b := range []string{"a", "b"} {
		if _, err := client.Write([]byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	// A bound far below the keepalive's 15 s, which would let the bytes go.
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, 2)
	if _, err := io.ReadFull(server, got); err != nil {
		t.Fatalf("the server read %q of the client's two writes: %v (the corked byte never went out)", got, err)
	}
	if _, err := server.Write([]byte("reply")); err != nil {
		t.Fatal(err)
	}
	if err := <-reply; err != nil {
		t.Fatal(err)
	}
	if !armedAndFound.Load() {
		t.Fatal("no poll armed the send half and found the first Write's completion: the test tests nothing")
	}
	// Each group has one member, which polls for itself: no hand-overs.
	if dc, ds := client.Stats().Dispatches, server.Stats().Dispatches; dc != 0 || ds != 0 {
		t.Fatalf("Stats.Dispatches %d (client), %d (server) in groups of one, want 0", dc, ds)
	}
}

// TestSimPollGroupDispatches: with both ends in one poll group, the
// client's Read parks as the group's leader and the server's Read behind
// it, on its own wakeup; the request's completion is polled by another
// goroutine than the server's and handed over: Stats.Dispatches counts it.
func TestSimPollGroupDispatches(t *testing.T) {
	sn := simGroupPipes(t, 1, simGroupOptions{oneGroup: true, armedCQ: true})
	defer sn.closeAll()
	client, server := sn.clients[0], sn.servers[0]
	// parked waits for n goroutines parked in frame.
	parked := func(what, frame string, n int) {
		t.Helper()
		conntest.Until(t, what, func() bool {
			k := 0
			for _, st := range procstat.Stacks() {
				if strings.Contains(st, frame) {
					k++
				}
			}
			return k >= n
		})
	}
	replied := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(client, make([]byte, 1))
		replied <- err
	}()
	parked("the client's Read to lead", "pollgroup.(*Member).lead", 1)
	requested := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(server, make([]byte, 1))
		requested <- err
	}()
	parked("the server's Read to follow", "pollgroup.(*Member).Wait(", 2)
	before := server.Stats().Dispatches
	if _, err := client.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	if err := <-requested; err != nil {
		t.Fatal(err)
	}
	if d := server.Stats().Dispatches - before; d == 0 {
		t.Fatal("the server's request came through another goroutine's poll, and Stats.Dispatches did not count it")
	}
	if _, err := server.Write([]byte("r")); err != nil {
		t.Fatal(err)
	}
	if err := <-replied; err != nil {
		t.Fatal(err)
	}
}

// TestSimPollGroupSendDoesNotWakeReader: a Read parked for its peer's
// answer needs no send completion, so the completion of the request its
// connection then sends raises no event on the group's CQ: the reader is
// not woken for nothing, and the answer wakes it.
func TestSimPollGroupSendDoesNotWakeReader(t *testing.T) {
	sn := simGroupPipes(t, 1, simGroupOptions{armedCQ: true})
	defer sn.closeAll()
	client, server := sn.clients[0], sn.servers[0]
	answered := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(client, make([]byte, 1))
		answered <- err
	}()
	conntest.Until(t, "the client's Read to park as its group's leader", func() bool {
		for _, st := range procstat.Stacks() {
			if strings.Contains(st, "pollgroup.(*Member).lead") && strings.Contains(st, "WaitReady") {
				return true
			}
		}
		return false
	})
	before := sn.clientCQ.CQ.Signals()
	if _, err := client.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(server, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	// The request has landed, and its send completion is in the client's
	// CQ (the fabric completes a send as it lands it).
	if n := sn.clientCQ.CQ.Signals() - before; n != 0 {
		t.Fatalf("the request's send completion raised %d events for the parked reader, want none", n)
	}
	if _, err := server.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	if n := sn.clientCQ.CQ.Signals() - before; n != 1 {
		t.Fatalf("the answer raised %d events, want 1", n)
	}
}
