package stream

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// armedQP is a queue pair whose CQ notifies as a device's does: a
// completion added while the CQ is armed leaves one event and disarms it,
// and completions already there when it is armed leave none. The test
// plays the peer by adding completions for the receives the engine posted.
type armedQP struct {
	noRegions
	mu       sync.Mutex
	posted   []uint64 // receive IDs, in the order posted
	cq       []wr.Completion
	armed    bool
	event    chan struct{}
	kicked   chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
}

func newArmedQP(eng *ring.Engine) *armedQP {
	q := &armedQP{event: make(chan struct{}, 1), kicked: make(chan struct{}, 1), stop: make(chan struct{})}
	for _, r := range eng.PostRecvs(nil) {
		q.posted = append(q.posted, r.ID)
	}
	return q
}

// deliver completes the next n posted receives with the message word imm.
func (q *armedQP) deliver(n int, imm uint32, byteLen uint32) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for range n {
		q.cq = append(q.cq, wr.Completion{ID: q.posted[0], Opcode: wr.WCRecvRDMAWithImm, Imm: imm, ByteLen: byteLen})
		q.posted = q.posted[1:]
		if q.armed {
			q.armed = false
			select {
			case q.event <- struct{}{}:
			default:
			}
		}
	}
}

func (q *armedQP) Step(flags wr.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if flags&wr.StepTakeEvent != 0 {
		select {
		case <-q.event:
		default:
		}
	}
	if flags&wr.StepArm != 0 {
		q.armed = true
	}
	for _, r := range recvs {
		q.posted = append(q.posted, r.ID)
	}
	n := copy(out, q.cq)
	q.cq = q.cq[n:]
	return n, nil
}

func (q *armedQP) Wait() (bool, error) {
	select {
	case <-q.event:
		return true, nil
	case <-q.kicked:
		return true, nil
	case <-q.stop:
		return true, net.ErrClosed
	}
}

func (q *armedQP) Collected() bool { return false }
func (q *armedQP) CollectAll()     {}

func (q *armedQP) NeedSends(bool) {}

func (q *armedQP) Kick() {
	select {
	case q.kicked <- struct{}{}:
	default:
	}
}
func (q *armedQP) Start(h EventHandler) {}
func (q *armedQP) Disconnect()          {}
func (q *armedQP) Shutdown()            { q.stopOnce.Do(func() { close(q.stop) }) }
func (q *armedQP) Destroy() error       { return nil }
func (q *armedQP) LocalAddr() net.Addr  { return clientAddr }
func (q *armedQP) RemoteAddr() net.Addr { return serverAddr }

// A credit window deep enough that more completions wait in the CQ than one
// bounded step polls.
func deepQueueSettings() Settings {
	return testSettings(func(s *Settings) {
		s.Linger, s.BusyPoll, s.KeepAlive = 0, 0, 0
		s.Ring.RecvQueueSize = 4096
	})
}

// TestBlockedReadAfterACutStep: a Read that blocks while more completions
// wait in the CQ than one step polls must not park on the channel, since
// completions that came before the arm leave no event: it finds the byte
// behind 1,100 keepalives.
func TestBlockedReadAfterACutStep(t *testing.T) {
	set := deepQueueSettings()
	eng := establishedEngine(t, set)
	q := newArmedQP(eng)
	c := Start(q, eng, set)
	defer c.Close()
	q.deliver(1100, uint32(ring.MakeMsg(ring.MsgCtrl, ring.CtrlKeepalive)), 0)
	q.deliver(1, uint32(ring.MakeMsg(ring.MsgData, 1)), 1)
	c.SetReadDeadline(time.Now().Add(time.Minute)) // a hang detector only
	if n, err := c.Read(make([]byte, 8)); n != 1 || err != nil {
		t.Fatalf("Read = %d, %v, want the byte waiting in the CQ", n, err)
	}
}

// TestDisconnectAfterACutStep: the peer's DISCONNECT behind more messages
// than one step polls still ends the stream cleanly: every byte, then
// io.EOF, not ring.ErrPeerGone.
func TestDisconnectAfterACutStep(t *testing.T) {
	set := deepQueueSettings()
	eng := establishedEngine(t, set)
	q := newArmedQP(eng)
	c := Start(q, eng, set)
	defer c.Close()
	const msgs = 1500
	q.deliver(msgs, uint32(ring.MakeMsg(ring.MsgData, 1)), 1)
	q.deliver(1, uint32(ring.MakeMsg(ring.MsgCtrl, ring.CtrlDisconnect)), 0)
	c.TransportDisconnected() // the connection manager's DISCONNECTED
	got, err := io.ReadAll(c)
	if len(got) != msgs || err != nil {
		t.Fatalf("read %d of the %d bytes sent before DISCONNECT, then %v; want all, then io.EOF", len(got), msgs, err)
	}
}
