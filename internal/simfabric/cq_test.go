package simfabric

import (
	"errors"
	"testing"

	"github.com/rnet-dev/rnet/internal/wr"
)

// sharedPairs makes n pairs whose a ends complete into cqA and b ends into
// cqB, with memory to write from a into b.
func sharedPairs(f *Fabric, n int, cqA, cqB *CQ) []*pair {
	caps := Caps{SendDepth: 8, RecvDepth: 8, MaxInline: 64}
	ps := make([]*pair, n)
	for i := range ps {
		a, b := f.PairOn(caps, caps, cqA, cqB)
		ps[i] = &pair{f: f, a: a, b: b,
			aMem: a.Register(make([]byte, 4096), false),
			bMem: b.Register(make([]byte, 4096), true)}
	}
	return ps
}

func pollShared(t *testing.T, cq *CQ) []wr.Completion {
	t.Helper()
	out := make([]wr.Completion, 64)
	n, err := cq.Poll(out)
	if err != nil {
		t.Fatal(err)
	}
	return out[:n]
}

// TestSharedCQ: the completions of several pairs come out of their shared
// CQs, each naming its queue pair, each endpoint's in its own order, with
// payloads landed first, under random wire and completion delays.
func TestSharedCQ(t *testing.T) {
	f := New(11, Options{MaxWireDelay: 3, MaxCompletionDelay: 3})
	cqA, cqB := f.NewCQ(CQOptions{}), f.NewCQ(CQOptions{})
	ps := sharedPairs(f, 3, cqA, cqB)
	seen := map[uint32]bool{}
	for _, p := range ps {
		for _, e := range []*Endpoint{p.a, p.b} {
			if e.QPNum() == 0 || seen[e.QPNum()] {
				t.Fatalf("queue pair number %d is zero or not unique", e.QPNum())
			}
			seen[e.QPNum()] = true
		}
	}
	for i, p := range ps {
		if err := p.b.PostRecv([]wr.Recv{{ID: 100}, {ID: 101}}); err != nil {
			t.Fatal(err)
		}
		copy(p.aMem.Buf, []byte{byte('a' + i), 1, 2, 3, 4, 5})
		if err := p.a.PostSend([]wr.Send{p.write(1, 0, 2, true), p.write(2, 2, 2, false), p.write(3, 4, 2, true)}); err != nil {
			t.Fatal(err)
		}
	}
	byQP := map[uint32][]wr.Completion{}
	for i := 0; i < 30; i++ {
		f.Step()
		for _, cq := range []*CQ{cqA, cqB} {
			for _, wc := range pollShared(t, cq) {
				byQP[wc.QPNum] = append(byQP[wc.QPNum], wc)
				if cq == cqB {
					// Landed before its completion was returned.
					p := ps[(wc.QPNum-1)/2]
					if got := p.bMem.Buf[0]; wc.Imm == 3 && got != p.aMem.Buf[0] {
						t.Fatalf("queue pair %d: completion before its payload landed", wc.QPNum)
					}
				}
			}
		}
	}
	if f.Pending() {
		t.Fatal("still pending")
	}
	for _, p := range ps {
		if p.a.PollCQ(make([]wr.Completion, 8)) != 0 || p.b.PollCQ(make([]wr.Completion, 8)) != 0 {
			t.Fatal("an endpoint on a shared CQ completed into its own")
		}
		sends, recvs := byQP[p.a.QPNum()], byQP[p.b.QPNum()]
		if len(sends) != 3 || sends[0].ID != 1 || sends[1].ID != 2 || sends[2].ID != 3 {
			t.Fatalf("queue pair %d: send completions %+v", p.a.QPNum(), sends)
		}
		if len(recvs) != 2 || recvs[0].ID != 100 || recvs[0].Imm != 1 || recvs[1].ID != 101 || recvs[1].Imm != 3 {
			t.Fatalf("queue pair %d: receive completions %+v", p.b.QPNum(), recvs)
		}
		if string(p.bMem.Buf[:6]) != string(p.aMem.Buf[:6]) {
			t.Fatalf("memory %q, want %q", p.bMem.Buf[:6], p.aMem.Buf[:6])
		}
		if st := p.a.Stats(); st.Completions != 3 {
			t.Fatalf("stats %+v", st)
		}
	}
	if cqA.Polled() != 9 || cqB.Polled() != 6 {
		t.Fatalf("polled %d and %d, want 9 and 6", cqA.Polled(), cqB.Polled())
	}
}

// TestOwnCQCarriesQPNum: completions of an endpoint's own CQ name its queue
// pair too.
func TestOwnCQCarriesQPNum(t *testing.T) {
	p := newPair(t, Options{Auto: true})
	if err := p.b.PostRecv([]wr.Recv{{ID: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := p.a.PostSend([]wr.Send{p.write(1, 0, 4, true)}); err != nil {
		t.Fatal(err)
	}
	if wcs := poll(p.a); len(wcs) != 1 || wcs[0].QPNum != p.a.QPNum() {
		t.Fatalf("%+v, want queue pair %d", wcs, p.a.QPNum())
	}
	if wcs := poll(p.b); len(wcs) != 1 || wcs[0].QPNum != p.b.QPNum() {
		t.Fatalf("%+v, want queue pair %d", wcs, p.b.QPNum())
	}
}

// TestSharedCQArmed: an armed CQ notifies once, for the first completion
// after Arm, and never for completions that were there before.
func TestSharedCQArmed(t *testing.T) {
	f := New(1, Options{Auto: true})
	cq := f.NewCQ(CQOptions{Armed: true})
	p := sharedPairs(f, 1, cq, nil)[0]
	send := func(id uint64) {
		t.Helper()
		if err := p.a.PostSend([]wr.Send{p.write(id, 0, 4, false)}); err != nil {
			t.Fatal(err)
		}
	}
	notified := func() bool {
		select {
		case <-cq.Notify():
			return true
		default:
			return false
		}
	}
	send(1)
	if notified() {
		t.Fatal("notified while not armed")
	}
	cq.Arm()
	if notified() {
		t.Fatal("arming notified for a completion already there")
	}
	send(2)
	send(3)
	if !notified() {
		t.Fatal("no notification for a completion after Arm")
	}
	if notified() {
		t.Fatal("two notifications for one Arm")
	}
	if wcs := pollShared(t, cq); len(wcs) != 3 {
		t.Fatalf("%+v", wcs)
	}
}

// TestSharedCQOverflow: one completion more than the CQ holds fails it for
// good, as on a device.
func TestSharedCQOverflow(t *testing.T) {
	f := New(1, Options{Auto: true})
	cq := f.NewCQ(CQOptions{Entries: 2})
	p := sharedPairs(f, 1, cq, nil)[0]
	if err := p.a.PostSend([]wr.Send{p.write(1, 0, 4, false), p.write(2, 0, 4, false)}); err != nil {
		t.Fatal(err)
	}
	if cq.Size() != 2 {
		t.Fatalf("size %d", cq.Size())
	}
	if err := p.a.PostSend([]wr.Send{p.write(3, 0, 4, false)}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := cq.Poll(make([]wr.Completion, 4)); !errors.Is(err, ErrCQOverflow) {
			t.Fatalf("poll after an overflow: %v", err)
		}
	}
}

// TestSharedCQKill: a killed endpoint's completions leave its CQ with it;
// those of the other endpoints on the CQ stay.
func TestSharedCQKill(t *testing.T) {
	f := New(1, Options{Auto: true})
	cq := f.NewCQ(CQOptions{})
	ps := sharedPairs(f, 2, cq, nil)
	for _, p := range ps {
		if err := p.a.PostSend([]wr.Send{p.write(1, 0, 4, false), p.write(2, 0, 4, false)}); err != nil {
			t.Fatal(err)
		}
	}
	f.Kill(ps[0].a)
	wcs := pollShared(t, cq)
	if len(wcs) != 2 || wcs[0].QPNum != ps[1].a.QPNum() || wcs[1].QPNum != ps[1].a.QPNum() {
		t.Fatalf("%+v, want the two of queue pair %d", wcs, ps[1].a.QPNum())
	}
}

// TestSharedCQNoAllocs: posting and polling through a shared CQ allocates
// nothing once its queues have grown.
func TestSharedCQNoAllocs(t *testing.T) {
	f := New(1, Options{Auto: true, DirectLanding: true})
	cq := f.NewCQ(CQOptions{})
	ps := sharedPairs(f, 4, cq, cq)
	recvs := []wr.Recv{{ID: 1}}
	sends := make([]wr.Send, len(ps))
	for i, p := range ps {
		sends[i] = p.write(uint64(i), 0, 64, true)
	}
	out := make([]wr.Completion, 16)
	round := func() {
		for i, p := range ps {
			if err := p.b.PostRecv(recvs); err != nil {
				t.Fatal(err)
			}
			if err := p.a.PostSend(sends[i : i+1]); err != nil {
				t.Fatal(err)
			}
		}
		for got := 0; got < 2*len(ps); {
			n, err := cq.Poll(out)
			if err != nil || n == 0 {
				t.Fatalf("poll: %d, %v", n, err)
			}
			got += n
		}
	}
	round()
	if a := testing.AllocsPerRun(100, round); a != 0 {
		t.Fatalf("%v allocations per round", a)
	}
}
