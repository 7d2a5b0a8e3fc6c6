package rnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/wr"
)

// frameStream is a checked byte stream: frames of a 4-byte length n, n
// bytes drawn from a generator seeded by the stream's seed, and the CRC-32
// of those bytes; a frame of length 0 ends it. The reader draws the same
// bytes, so every byte is compared, and a lost, repeated or reordered
// frame fails its length or its bytes.
type frameStream struct {
	rng *rand.Rand
	buf []byte
}

func newFrameStream(seed uint64) *frameStream {
	return &frameStream{rng: rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1)), buf: make([]byte, 16<<10)}
}

// next draws the next frame's payload: 1 to 16 KiB.
func (s *frameStream) next() []byte {
	p := s.buf[:1+s.rng.IntN(len(s.buf))]
	var word uint64
	for i := range p {
		if i%8 == 0 {
			word = s.rng.Uint64()
		}
		p[i] = byte(word >> (8 * (i % 8)))
	}
	return p
}

// streamWriter writes frames to c until more says stop, then the end frame,
// then closes c, or only its writing half unless it owns c. It closes c on
// an error, so that the peer learns of it. progress counts the frames
// written.
func streamWriter(c *Conn, own bool, seed uint64, more func(frames int) bool, progress *atomic.Int64) (int, error) {
	s := newFrameStream(seed)
	frame := make([]byte, 8+16<<10+4)
	frames := 0
	for ; more(frames); frames++ {
		p := s.next()
		binary.BigEndian.PutUint32(frame, uint32(len(p)))
		copy(frame[4:], p)
		binary.BigEndian.PutUint32(frame[4+len(p):], crc32.ChecksumIEEE(p))
		if _, err := c.Write(frame[:8+len(p)]); err != nil {
			c.Close()
			return frames, err
		}
		progress.Add(1)
	}
	if _, err := c.Write(make([]byte, 4)); err != nil {
		c.Close()
		return frames, err
	}
	if !own {
		return frames, c.CloseWrite()
	}
	return frames, c.Close()
}

// streamReader reads and checks frames from c up to the end frame, then
// expects io.EOF. It closes c if it owns it, or on an error. It returns
// the frames read.
func streamReader(c *Conn, own bool, seed uint64, progress *atomic.Int64) (frames int, err error) {
	defer func() {
		if own || err != nil {
			c.Close()
		}
	}()
	s := newFrameStream(seed)
	got := make([]byte, 16<<10+4)
	var hdr [4]byte
	for ; ; frames++ {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return frames, err
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if n == 0 {
			if k, err := c.Read(got[:1]); k != 0 || err != io.EOF {
				return frames, fmt.Errorf("after the end frame: %d bytes, %v; want io.EOF", k, err)
			}
			return frames, nil
		}
		want := s.next()
		if n != len(want) {
			return frames, fmt.Errorf("frame %d: length %d, want %d", frames, n, len(want))
		}
		if _, err := io.ReadFull(c, got[:n+4]); err != nil {
			return frames, err
		}
		if crc := binary.BigEndian.Uint32(got[n:]); crc != crc32.ChecksumIEEE(got[:n]) {
			return frames, fmt.Errorf("frame %d: CRC mismatch", frames)
		}
		for i := range want {
			if got[i] != want[i] {
				return frames, fmt.Errorf("frame %d: byte %d is %#x, want %#x", frames, i, got[i], want[i])
			}
		}
		progress.Add(1)
	}
}

// streamResult is one direction of a pair: the frames each end counted and
// how each ended.
type streamResult struct {
	sent, read         int
	writeErr, readErr  error
	wrote, readFrames  atomic.Int64
	writerEnd, readEnd chan struct{}
}

// startStream streams frames from w to r until more says stop; own says
// the stream is the only one on its Conns, which it closes when done.
func startStream(w, r *Conn, own bool, seed uint64, more func(frames int) bool) *streamResult {
	res := &streamResult{writerEnd: make(chan struct{}), readEnd: make(chan struct{})}
	go func() {
		defer close(res.writerEnd)
		res.sent, res.writeErr = streamWriter(w, own, seed, more, &res.wrote)
	}()
	go func() {
		defer close(res.readEnd)
		res.read, res.readErr = streamReader(r, own, seed, &res.readFrames)
	}()
	return res
}

// wait waits for both ends to finish, failing the test if they hang.
func (r *streamResult) wait(t *testing.T, what string) {
	t.Helper()
	for _, ch := range []chan struct{}{r.writerEnd, r.readEnd} {
		select {
		case <-ch:
		case <-time.After(2 * time.Minute): // a hang detector only
			t.Fatalf("%s: a stream end still runs after two minutes:\n%s", what, strings.Join(procstat.Stacks(), "\n\n"))
		}
	}
}

// checkComplete checks that every frame written was read and checked.
func (r *streamResult) checkComplete(t *testing.T, what string) {
	t.Helper()
	if r.writeErr != nil || r.readErr != nil || r.sent != r.read {
		t.Errorf("%s: wrote %d frames (%v), read %d (%v)", what, r.sent, r.writeErr, r.read, r.readErr)
	}
}

// TestSimPollGroupStreams: many connections of a poll group stream checked
// data both ways at once; every byte arrives, in order, on its own
// connection, and the groups go away with their last member.
func TestSimPollGroupStreams(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    simGroupOptions
	}{
		{"TwoGroups", simGroupOptions{}},
		{"OneGroup", simGroupOptions{oneGroup: true}},
		{"ArmedCQ", simGroupOptions{armedCQ: true}},
		// Wrap-around, credit stalls and full inboxes on every few writes.
		{"SmallRings", simGroupOptions{cfg: &Config{SendBufferSize: 4096, RecvBufferSize: 4096,
			SendQueueSize: 16, RecvQueueSize: 16}}},
		// Every blocked call spins on the shared CQ, as rstream does.
		{"BusyPoll", simGroupOptions{cfg: &Config{BusyPoll: time.Hour}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gor0 := procstat.GoroutineIDs()
			const pairs, frames = 12, 40
			sn := simGroupPipes(t, pairs, tc.o)
			more := func(n int) bool { return n < frames }
			var up, down []*streamResult
			for i := range pairs {
				up = append(up, startStream(sn.clients[i], sn.servers[i], false, uint64(2*i), more))
				down = append(down, startStream(sn.servers[i], sn.clients[i], false, uint64(2*i+1), more))
			}
			for i := range pairs {
				for dir, r := range []*streamResult{up[i], down[i]} {
					what := fmt.Sprintf("pair %d, direction %d", i, dir)
					r.wait(t, what)
					r.checkComplete(t, what)
				}
			}
			sn.closeAll()
			sn.checkGroupsGone(t)
			if fresh := procstat.WaitNoNewGoroutines(gor0); len(fresh) > 0 {
				t.Errorf("%d goroutines left:\n%s", len(fresh), strings.Join(fresh, "\n\n"))
			}
		})
	}
}

// TestSimPollGroupNettest: the nettest suite over connections whose two
// ends are the members of one poll group.
func TestSimPollGroupNettest(t *testing.T) {
	testNettest(t, func(t *testing.T) (*Conn, *Conn) {
		sn := simGroupPipes(t, 1, simGroupOptions{oneGroup: true, armedCQ: true})
		return sn.clients[0], sn.servers[0]
	})
}

// groupFault is one way a member of a poll group can fail.
type groupFault struct {
	name   string
	inject func(sn *simGroupNet, i int)
}

var groupFaults = []groupFault{
	// The client's queue pair reports an error completion (a local fault).
	{"ClientCompletionError", func(sn *simGroupNet, i int) { sn.clientQPs[i].Endpoint().InjectError(wr.WCGeneralErr) }},
	// The server vanishes like a crashed host: the client's sends go
	// unanswered.
	{"ServerKilled", func(sn *simGroupNet, i int) { sn.f.Kill(sn.serverQPs[i].Endpoint()) }},
	// Both queue pairs go to the error state at once, everything flushed.
	{"BothDisconnected", func(sn *simGroupNet, i int) { sn.clientQPs[i].Endpoint().Disconnect() }},
	// The server's queue pair reports an error completion.
	{"ServerCompletionError", func(sn *simGroupNet, i int) { sn.serverQPs[i].Endpoint().InjectError(wr.WCLocProtErr) }},
	// The client vanishes.
	{"ClientKilled", func(sn *simGroupNet, i int) { sn.f.Kill(sn.clientQPs[i].Endpoint()) }},
}

// TestSimPollGroupMembersFailOneByOne: while the connections of two poll
// groups stream, members fail one at a time in every way groupFaults
// knows. Each failed connection's ends see an error that says so (never a
// clean io.EOF), every other connection keeps streaming meanwhile and in
// the end has lost nothing, and everything goes away with the last Close.
func TestSimPollGroupMembersFailOneByOne(t *testing.T) {
	for _, oneGroup := range []bool{false, true} {
		t.Run(fmt.Sprintf("oneGroup=%v", oneGroup), func(t *testing.T) {
			testGroupMembersFail(t, simGroupOptions{oneGroup: oneGroup, armedCQ: true})
		})
	}
}

func testGroupMembersFail(t *testing.T, o simGroupOptions) {
	gor0 := procstat.GoroutineIDs()
	failing := len(groupFaults)
	pairs := failing + 4
	sn := simGroupPipes(t, pairs, o)
	faultsDone := make(chan struct{})
	const minFrames = 20
	var healthyMore = func(n int) bool {
		select {
		case <-faultsDone:
			return n < minFrames
		default:
			return true
		}
	}
	streams := make([]*streamResult, pairs)
	for i := range pairs {
		more := healthyMore
		if i < failing {
			more = func(int) bool { return true } // until its fault
		}
		streams[i] = startStream(sn.clients[i], sn.servers[i], true, uint64(i), more)
	}
	waitUntil(t, "every pair to stream", func() bool {
		for _, s := range streams {
			if s.readFrames.Load() == 0 {
				return false
			}
		}
		return true
	})
	for i, fault := range groupFaults {
		before := make([]int64, pairs)
		for j := failing; j < pairs; j++ {
			before[j] = streams[j].readFrames.Load()
		}
		fault.inject(sn, i)
		s := streams[i]
		s.wait(t, fault.name)
		for _, err := range []error{s.writeErr, s.readErr} {
			var opErr *net.OpError
			if err == nil || errors.Is(err, io.EOF) || !errors.As(err, &opErr) {
				t.Errorf("%s: the failed connection's ends returned %v and %v; want an error saying why", fault.name, s.writeErr, s.readErr)
				break
			}
		}
		t.Logf("%s: writer: %v; reader: %v", fault.name, s.writeErr, s.readErr)
		// The others go on streaming after the failure.
		waitUntil(t, "the healthy pairs to stream on after "+fault.name, func() bool {
			for j := failing; j < pairs; j++ {
				if streams[j].readFrames.Load() <= before[j] {
					return false
				}
			}
			return true
		})
	}
	close(faultsDone)
	for j := failing; j < pairs; j++ {
		what := fmt.Sprintf("healthy pair %d", j)
		streams[j].wait(t, what)
		streams[j].checkComplete(t, what)
	}
	sn.checkGroupsGone(t)
	if fresh := procstat.WaitNoNewGoroutines(gor0); len(fresh) > 0 {
		t.Errorf("%d goroutines left:\n%s", len(fresh), strings.Join(fresh, "\n\n"))
	}
}

// TestPollGroupMemberOrder: each member of a poll group receives its
// completions in the order its queue pair produced them, while many
// members post, step (polling the shared CQ themselves when nobody else
// does) and wait at once, and the leader hands over the rest.
func TestPollGroupMemberOrder(t *testing.T) {
	const pairs, msgs, window = 8, 3000, 16
	f := simfabric.New(3, simfabric.Options{Auto: true, RNRRetry: true})
	cq := newSimGroupCQ(f.NewCQ(simfabric.CQOptions{Armed: true}))
	g := newPollGroup(cq)
	caps := simfabric.Caps{SendDepth: window, RecvDepth: window}
	type end struct {
		ep   *simfabric.Endpoint
		m    *groupMember
		post memberPost
	}
	newEnd := func(ep *simfabric.Endpoint) *end {
		m, ok := g.reserve(2*window, 2*window, 0)
		if !ok {
			t.Fatal("the group's CQ is full")
		}
		e := &end{ep: ep, m: m}
		e.post = func(recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
			if err := ep.PostRecv(recvs); err != nil {
				return 0, err
			}
			if err := ep.PostSend(sends); err != nil {
				return 0, err
			}
			return pollTries(cq.cq, out, tries)
		}
		return e
	}
	var ends []*end
	for range pairs {
		a, b := f.PairOn(caps, caps, cq.cq, cq.cq)
		ends = append(ends, newEnd(a), newEnd(b))
	}
	for _, e := range ends {
		e.m.attach(e.ep.QPNum())
	}
	// run steps e until it has taken msgs completions, posting what next
	// allows, and checks each with check.
	run := func(e *end, next func(inFlight int) ([]wr.Recv, []wr.Send), check func(i int, wc wr.Completion) error) error {
		out := make([]wr.Completion, 8)
		done := 0
		for done < msgs {
			recvs, sends := next(done)
			n, err := e.m.step(e.post, recvs, sends, out, 1)
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
				if _, err := e.m.wait(); err != nil {
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
			e.m.stop()
			f.Kill(e.ep)
			if err := g.leave(e.m, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	select {
	case <-g.cq.(*simGroupCQ).destroyed:
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
	cq := newSimGroupCQ(f.NewCQ(simfabric.CQOptions{}))
	g := newPollGroup(cq)
	m, ok := g.reserve(8, 8, 0)
	if !ok {
		t.Fatal("the group's CQ is full")
	}
	a, _ := f.PairOn(simfabric.Caps{SendDepth: 4, RecvDepth: 4}, simfabric.Caps{}, cq.cq, nil)
	m.attach(a.QPNum())
	post := func(recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
		return pollTries(cq.cq, out, tries)
	}

	// Play a poller caught between its poll and its hand-over.
	g.pollMu.Lock()
	if err := a.PostSend([]wr.Send{{ID: 7, Op: wr.OpWrite, Signaled: true}}); err != nil {
		t.Fatal(err)
	}
	held := make([]wr.Completion, 4)
	n, err := cq.cq.Poll(held)
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
		n, err := m.step(post, nil, nil, out, 1)
		res <- stepResult{n, err, out[0]}
	}()
	var got *stepResult
	waitUntil(t, "the step to wait for the poll lock or return", func() bool {
		select {
		case r := <-res:
			got = &r
			return true
		default:
		}
		for _, st := range procstat.Stacks() {
			if strings.Contains(st, "pollGroup).lockPoll") && strings.Contains(st, "sync.(*Mutex).Lock") {
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
	m.stop()
	f.Kill(a)
	if err := g.leave(m, nil); err != nil {
		t.Fatal(err)
	}
	<-g.cq.(*simGroupCQ).destroyed
}
