package pollgroup

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/wr"
)

// TestPollGroupMemberOrder: each member of a poll group receives its
// completions in the order its queue pair produced them, while many
// members post, step (polling the shared CQ themselves when nobody else
// does) and wait at once, and the leader hands over the rest.
func TestPollGroupMemberOrder(t *testing.T) {
	const pairs, msgs, window = 8, 3000, 16
	f := simfabric.New(3, simfabric.Options{Auto: true, RNRRetry: true})
	cq := simqp.NewGroupCQ(f.NewCQ(simfabric.CQOptions{Armed: true}), ErrInterrupted)
	g := New(cq, nil)
	caps := simfabric.Caps{SendDepth: window, RecvDepth: window}
	type end struct {
		ep *simfabric.Endpoint
		m  *Member
	}
	newEnd := func(ep *simfabric.Endpoint) *end {
		m, ok := g.Reserve(2*window, 2*window, 0)
		if !ok {
			t.Fatal("the group's CQ is full")
		}
		return &end{ep: ep, m: m}
	}
	var ends []*end
	for range pairs {
		a, b := f.PairOn(caps, caps, cq.CQ, cq.CQ)
		ends = append(ends, newEnd(a), newEnd(b))
	}
	for _, e := range ends {
		e.m.Attach(simqp.GroupEndpoint{Endpoint: e.ep, CQ: cq.CQ}, nil)
		// The senders wait for their sends' completions too.
		e.m.NeedSends(true)
	}
	// run steps e until it has taken msgs completions, posting what next
	// allows, and checks each with check.
	run := func(e *end, next func(inFlight int) ([]wr.Recv, []wr.Send), check func(i int, wc wr.Completion) error) error {
		out := make([]wr.Completion, 8)
		done := 0
		for done < msgs {
			recvs, sends := next(done)
			n, err := e.m.Step(recvs, sends, out, 1)
			if err != nil {
				return err
			}
			for _, wc := range out[:n] {
				if wc.QPNum != e.ep.QPNum() {
					return fmt.Errorf("queue pair %d got a completion of %d", e.ep.QPNum(), wc.QPNum)
				}
				if err := check(done, wc); err != nil {
					return err
				}
				done++
			}
			if n == 0 && len(recvs) == 0 && len(sends) == 0 {
				if _, err := e.m.Wait(); err != nil {
					return err
				}
			}
		}
		return nil
	}
	errs := make(chan error, 2*pairs)
	for p := range pairs {
		sender, receiver := ends[2*p], ends[2*p+1]
		go func() { // write-with-immediate number i, at most window in flight
			posted := 0
			send := make([]wr.Send, 1)
			errs <- run(sender, func(done int) ([]wr.Recv, []wr.Send) {
				if posted == msgs || posted-done == window {
					return nil, nil
				}
				send[0] = wr.Send{ID: uint64(posted), Op: wr.OpWriteImm, Imm: uint32(posted), Signaled: true}
				posted++
				return nil, send
			}, func(i int, wc wr.Completion) error {
				if wc.Status != wr.WCSuccess || wc.ID != uint64(i) {
					return fmt.Errorf("send completion %d: %+v", i, wc)
				}
				return nil
			})
		}()
		go func() { // keep window receives posted, numbered in order
			posted := 0
			recv := make([]wr.Recv, 1)
			errs <- run(receiver, func(done int) ([]wr.Recv, []wr.Send) {
				if posted == msgs || posted-done == window {
					return nil, nil
				}
				recv[0] = wr.Recv{ID: uint64(posted)}
				posted++
				return recv, nil
			}, func(i int, wc wr.Completion) error {
				if wc.Status != wr.WCSuccess || wc.ID != uint64(i) || wc.Imm != uint32(i) {
					return fmt.Errorf("receive completion %d: %+v", i, wc)
				}
				return nil
			})
		}()
	}
	for range 2 * pairs {
		select {
		case err := <-errs:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(2 * time.Minute): // a hang detector only
			t.Fatalf("members still running after two minutes:\n%s", strings.Join(procstat.Stacks(), "\n\n"))
		}
	}
	var wg sync.WaitGroup
	for _, e := range ends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.m.Stop()
			f.Kill(e.ep)
			if err := g.leave(e.m, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	select {
	case <-cq.Destroyed():
	case <-time.After(time.Minute): // a hang detector only
		t.Fatal("the CQ is still there after the last member left")
	}
	if g.strays != 0 {
		t.Errorf("%d completions for no member", g.strays)
	}
}

// TestPollGroupStepWaitsForHandOver: a step that does not spin, finding
// its inbox empty while another goroutine has polled the CQ and not yet
// handed over what it found, waits for the hand-over and returns the
// completion: its caller takes an empty step for an empty CQ, and a drain
// before a disconnect would otherwise miss the peer's last message.
func TestPollGroupStepWaitsForHandOver(t *testing.T) {
	f := simfabric.New(1, simfabric.Options{Auto: true})
	cq := simqp.NewGroupCQ(f.NewCQ(simfabric.CQOptions{}), ErrInterrupted)
	g := New(cq, nil)
	m, ok := g.Reserve(8, 8, 0)
	if !ok {
		t.Fatal("the group's CQ is full")
	}
	a, _ := f.PairOn(simfabric.Caps{SendDepth: 4, RecvDepth: 4}, simfabric.Caps{}, cq.CQ, nil)
	m.Attach(&numQP{num: a.QPNum(), poll: func(out []wr.Completion, tries int) (int, error) {
		return simqp.PollTries(cq.CQ, out, tries)
	}}, nil)

	// Play a poller caught between its poll and its hand-over.
	g.pollMu.Lock()
	if err := a.PostSend([]wr.Send{{ID: 7, Op: wr.OpWrite, Signaled: true}}); err != nil {
		t.Fatal(err)
	}
	held := make([]wr.Completion, 4)
	n, err := cq.CQ.Poll(held)
	if n != 1 || err != nil {
		t.Fatalf("poll: %d, %v", n, err)
	}
	type stepResult struct {
		n   int
		err error
		wc  wr.Completion
	}
	res := make(chan stepResult, 1)
	go func() {
		out := make([]wr.Completion, 4)
		n, err := m.Step(nil, nil, out, 1)
		res <- stepResult{n, err, out[0]}
	}()
	var got *stepResult
	conntest.Until(t, "the step to wait for the poll lock or return", func() bool {
		select {
		case r := <-res:
			got = &r
			return true
		default:
		}
		for _, st := range procstat.Stacks() {
			if strings.Contains(st, "pollgroup.(*Member).Step") && strings.Contains(st, "sync.(*Mutex).Lock") {
				return true
			}
		}
		return false
	})
	g.deliverLocked(held[:n])
	g.pollMu.Unlock()
	if got == nil {
		r := <-res
		got = &r
	}
	if got.n != 1 || got.err != nil || got.wc.ID != 7 {
		t.Fatalf("step = %d, %v, %+v; want the completion the poll in progress held", got.n, got.err, got.wc)
	}
	m.Stop()
	f.Kill(a)
	if err := g.leave(m, nil); err != nil {
		t.Fatal(err)
	}
	<-cq.Destroyed()
}
