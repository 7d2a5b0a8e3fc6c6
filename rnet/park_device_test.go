//go:build linux && cgo

package rnet

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/pollgroup"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// A Read that parks on a device costs one crossing into C: the one in which
// its wait, the only one and so its poll group's leader (woken by the
// netpoller), takes the event, arms the CQ again and polls the message. The
// arm it leaves behind stands for the next wait, so that wait parks without
// crossing first; only the connection's first wait crosses to arm (round 0
// here, which is not measured). Round 0 also takes the client's credit
// update from setup: the client posted it before round 0's message on the
// same reliable queue pair, so it has been processed once that Read returns,
// and the measured rounds receive their messages alone (checked below). The
// peer's Write costs one crossing. The receives the messages used go back in
// batches of a quarter of ring.RecvHeadroom, one crossing per batch, after
// the wakeup.
//
// The test counts the two connections' own crossings (their members' steps
// and the server's poll group's polls), not the process's, so that nothing
// else running in the process can change them.
// It accounts for the wakeups that are not the message's: the event of a
// completion of the server's own earlier send (what setup sent, since the
// server sends nothing in the measured rounds), which wakes the wait with a
// crossing of its own. If that completion was still in the CQ, the wakeup
// finds only send completions and ends the park too; if a step had
// already polled it, the wakeup finds nothing and the wait parks again
// within the same park. Each earlier send leaves at most one such event;
// any other extra crossing or park fails the test. Spinning is off so that
// the reader parks at once, and keepalives are an hour apart so that no
// tick steps either connection.
func TestRXEParkCostsOneCrossing(t *testing.T) {
	client, server := rxeMaker(rdmatest.Require(t), &Config{BusyPoll: -1, KeepAlive: time.Hour})(t)
	defer client.Close()
	defer server.Close()
	counts := watchPark(t, client.conn.QueuePair().(*verbsQP).member, server.conn.QueuePair().(*verbsQP).member)
	parking := counts.parking

	// Two batches of reposts: any eight receives in a row, with no send in
	// between, complete exactly two.
	const measured = 2 * (ring.RecvHeadroom / 4)
	buf := make([]byte, 16)
	var start Stats
	repostCrossings, strayWakes := uint64(0), uint64(0)
	for round := range 1 + measured {
		if round == 1 {
			start = server.Stats()
		}
		select {
		case <-parking: // left by an earlier round's second park
		default:
		}
		before := counts.snapshot(server)
		got := make(chan error, 1)
		go func() {
			n, err := server.Read(buf)
			if err == nil && !bytes.Equal(buf[:n], []byte{byte(round)}) {
				t.Errorf("read %q, want %q", buf[:n], []byte{byte(round)})
			}
			got <- err
		}()
		<-parking
		beforePark := counts.serverPosts.Load() - before.serverPosts
		if _, err := client.Write([]byte{byte(round)}); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		d := counts.snapshot(server).minus(before)
		t.Logf("round %d: client %d crossing(s); server %d before parking, %d poll(s) of which %d woken, %d found only its own sends and %d nothing, %d after the wakeup; %d park(s)",
			round, d.clientPosts, beforePark, d.polls, d.wakes, d.sendsOnly, d.empty, d.serverPosts-beforePark, d.parks)
		if round == 0 {
			continue // the first wait arms
		}
		if beforePark != 0 {
			t.Errorf("round %d: the Read crossed %d times before it parked, want 0: the CQ stays armed", round, beforePark)
		}
		if want := 1 + d.sendsOnly + d.empty; d.polls != want || d.wakes != want || d.parks != 1+d.sendsOnly {
			t.Errorf("round %d: the wait polled %d times (%d of them woken) in %d parks, want %d polls, all woken, in %d parks: one for the message, %d for wakeups that found only the server's own send completions, %d for ones that found nothing",
				round, d.polls, d.wakes, d.parks, want, 1+d.sendsOnly, d.sendsOnly, d.empty)
		}
		strayWakes += d.sendsOnly + d.empty
		if d.clientPosts != 1 {
			t.Errorf("round %d: the client's Write crossed %d times, want 1", round, d.clientPosts)
		}
		repostCrossings += d.serverPosts - beforePark
	}
	// The premise of the repost count: in the measured rounds the server
	// took the messages alone, and sent nothing that reposts could ride on.
	end := server.Stats()
	if got := end.RecvCompletions - start.RecvCompletions; got != measured || end.MessagesReceived-start.MessagesReceived != measured {
		t.Fatalf("the server took %d receives and %d messages in %d rounds, want one message each", got, end.MessagesReceived-start.MessagesReceived, measured)
	}
	if sent := end.CreditUpdatesSent + end.KeepalivesSent + end.MessagesSent - start.CreditUpdatesSent - start.KeepalivesSent - start.MessagesSent; sent != 0 {
		t.Fatalf("the server sent %d messages in the measured rounds, want none", sent)
	}
	if sentBefore := start.CreditUpdatesSent + start.KeepalivesSent + start.MessagesSent; strayWakes > sentBefore {
		t.Errorf("%d wakeups in the measured rounds were not the message's, more than the %d sends the server made before them", strayWakes, sentBefore)
	}
	if want := uint64(measured / (ring.RecvHeadroom / 4)); repostCrossings != want {
		t.Errorf("after their wakeups the Reads crossed %d times in %d rounds, want %d: one per batch of %d reposts", repostCrossings, measured, want, ring.RecvHeadroom/4)
	}
}

// parkWatch counts, through the poll groups' test hooks, the crossings of
// two connections' steps (not the process's, so that nothing else running
// in the process can change them), the polls of the server's poll group
// and what they found, and signals each park of the server's waits.
type parkWatch struct {
	clientPosts, serverPosts atomic.Uint64
	polls, wakes, sendsOnly  atomic.Uint64
	empty                    atomic.Uint64 // wakeups that found nothing
	parking                  chan struct{}
}

func watchPark(t *testing.T, client, server *pollgroup.Member) *parkWatch {
	w := &parkWatch{parking: make(chan struct{}, 1)}
	t.Cleanup(pollgroup.SetTestHooks(&pollgroup.Hooks{
		Crossed: func(m *pollgroup.Member) {
			switch m {
			case client:
				w.clientPosts.Add(1)
			case server:
				w.serverPosts.Add(1)
			}
		},
		Polled: func(g *pollgroup.Group, flags verbs.StepFlags, found []wr.Completion) {
			if server.InGroup(g) {
				w.notePoll(flags, found)
			}
		},
		Parking: func(m *pollgroup.Member) {
			if m == server {
				select {
				case w.parking <- struct{}{}:
				default:
				}
			}
		},
	}))
	return w
}

// notePoll counts a poll of the server's group and what it found.
func (w *parkWatch) notePoll(flags verbs.StepFlags, found []wr.Completion) {
	w.polls.Add(1)
	if flags&verbs.StepTakeEvent != 0 {
		w.wakes.Add(1)
	}
	recvs := 0
	for i := range found {
		if found[i].Opcode.IsRecv() {
			recvs++
		}
	}
	switch {
	case flags&verbs.StepTakeEvent != 0 && len(found) == 0:
		w.empty.Add(1)
	case len(found) > 0 && recvs == 0:
		w.sendsOnly.Add(1)
	}
}

// parkCounts are the counters a park round reads.
type parkCounts struct {
	clientPosts, serverPosts uint64
	polls, wakes, sendsOnly  uint64
	empty, parks             uint64
}

func (w *parkWatch) snapshot(server *Conn) parkCounts {
	return parkCounts{
		clientPosts: w.clientPosts.Load(), serverPosts: w.serverPosts.Load(),
		polls: w.polls.Load(), wakes: w.wakes.Load(), sendsOnly: w.sendsOnly.Load(),
		empty: w.empty.Load(), parks: server.Stats().Parks,
	}
}

func (a parkCounts) minus(b parkCounts) parkCounts {
	return parkCounts{
		clientPosts: a.clientPosts - b.clientPosts, serverPosts: a.serverPosts - b.serverPosts,
		polls: a.polls - b.polls, wakes: a.wakes - b.wakes, sendsOnly: a.sendsOnly - b.sendsOnly,
		empty: a.empty - b.empty, parks: a.parks - b.parks,
	}
}
