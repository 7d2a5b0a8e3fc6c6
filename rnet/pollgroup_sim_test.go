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
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/conntest"
	"github.com/rnet-dev/rnet/internal/procstat"
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
	conntest.Until(t, "every pair to stream", func() bool {
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
		conntest.Until(t, "the healthy pairs to stream on after "+fault.name, func() bool {
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
