package rnettest

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/stream"
	"github.com/rnet-dev/rnet/internal/wr"
	"github.com/rnet-dev/rnet/rnet"
)

// Faults a test injects into a Fabric's connections, to see how the code
// under test handles a connection that fails or stalls: each takes one end,
// a *rnet.Conn the Fabric made (by Dial, Accept or Pipe).

// errNotOurs is the error of a fault asked of a Conn the Fabric did not
// make (or one that is closed).
var errNotOurs = errors.New("rnettest: the Conn is not a live connection of this Fabric")

// Cut cuts c's connection as a failed link or a lost peer that the
// connection manager reports does: both ends fail with rnet.ErrPeerGone
// (inside a *net.OpError) once they have read the bytes that arrived
// before; a blocked Read or Write returns it at once.
func (f *Fabric) Cut(c *rnet.Conn) error {
	e := f.endOf(c)
	if e == nil {
		return errNotOurs
	}
	// As the connection manager's DISCONNECTED event, without the
	// rsocket goodbye, at both ends.
	e.conn.TransportDisconnected()
	e.peer.conn.TransportDisconnected()
	return nil
}

// VanishPeer makes c's peer vanish without a word, as a host that loses
// power does: what c sends from then on fails with a *rnet.CompletionError
// (status rnet.WCRetryExcErr, matching rnet.ErrPeerGone), and a c that only
// reads learns of it from its keepalives, after three periods of
// Config.KeepAlive (set it to a second or two in a test). The peer's own
// Conn is left as a dead host leaves it; closing it (as its process's exit
// would) tells c as a disconnect does.
func (f *Fabric) VanishPeer(c *rnet.Conn) error {
	e := f.endOf(c)
	if e == nil {
		return errNotOurs
	}
	e.peer.qp.Endpoint().Vanish()
	return nil
}

// HoldCredits makes c stop granting its peer credits, as a receiver that
// falls behind does: the peer sends on while the credits and receive-ring
// space it holds last, then its Writes wait (and its write deadline can
// pass, Stats.CreditStalls or BufferStalls count). What c reads meanwhile
// earns the peer nothing until release is called.
func (f *Fabric) HoldCredits(c *rnet.Conn) (release func(), err error) {
	e := f.endOf(c)
	if e == nil {
		return nil, errNotOurs
	}
	e.conn.HoldCredits(true)
	var once sync.Once
	return func() { once.Do(func() { e.conn.HoldCredits(false) }) }, nil
}

// Delay makes what c sends from now on (data, credit updates, keepalives)
// reach its peer d later, as a long or congested path would, in order; 0
// ends the delay for what is sent next.
func (f *Fabric) Delay(c *rnet.Conn, d time.Duration) error {
	e := f.endOf(c)
	if e == nil {
		return errNotOurs
	}
	e.qp.delay.Store(int64(max(d, 0)))
	return nil
}

// end is one end of one of the Fabric's connections.
type end struct {
	conn *stream.Conn
	qp   *faultQP
	peer *end
}

// register records a connection's two ends, weakly, so that a Conn
// dropped without Close is still collected.
func (f *Fabric) register(c, s *rnet.Conn, cs, ss *stream.Conn, cq, sq *faultQP) {
	ce := &end{conn: cs, qp: cq}
	se := &end{conn: ss, qp: sq, peer: ce}
	ce.peer = se
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ends == nil {
		f.ends = make(map[weak.Pointer[rnet.Conn]]*end)
	}
	for k := range f.ends {
		if k.Value() == nil {
			delete(f.ends, k)
		}
	}
	f.ends[weak.Make(c)] = ce
	f.ends[weak.Make(s)] = se
}

// endOf is c's end, or nil if the Fabric did not make c or c is closed.
func (f *Fabric) endOf(c *rnet.Conn) *end {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.ends[weak.Make(c)]
	if e == nil || e.qp.destroyed.Load() {
		return nil
	}
	return e
}

// faultQP is a simulated queue pair whose posts a Delay can hold back.
type faultQP struct {
	*simqp.QP
	delay     atomic.Int64 // time.Duration; 0 posts at once
	destroyed atomic.Bool

	mu    sync.Mutex
	held  []heldSend  // posts waiting for their time, in order
	timer *time.Timer // posts the first of held when due
	stop  bool        // Destroy came: post nothing more
}

type heldSend struct {
	due time.Time
	wr  wr.Send
}

// Step posts sends at once, or holds them back by the delay, behind any
// held already.
func (q *faultQP) Step(flags wr.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	if len(sends) > 0 {
		if d := time.Duration(q.delay.Load()); d > 0 || q.holding() {
			q.hold(sends, d)
			sends = nil
		}
	}
	return q.QP.Step(flags, recvs, sends, out, tries)
}

func (q *faultQP) holding() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.held) > 0
}

func (q *faultQP) hold(sends []wr.Send, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	due := time.Now().Add(d)
	for _, s := range sends {
		q.held = append(q.held, heldSend{due: due, wr: s})
	}
	if q.timer == nil {
		q.timer = time.AfterFunc(time.Until(q.held[0].due), q.postDue)
	}
}

// postDue posts the held sends whose time has come, and waits for the next.
func (q *faultQP) postDue() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.timer = nil
	if q.stop {
		return
	}
	now := time.Now()
	n := 0
	for n < len(q.held) && !q.held[n].due.After(now) {
		n++
	}
	if n > 0 {
		batch := make([]wr.Send, n)
		for i := range batch {
			batch[i] = q.held[i].wr
		}
		// An endpoint that failed meanwhile flushes what it has; these
		// are lost with it, as on a wire that went down.
		q.Endpoint().PostSend(batch)
		q.held = append(q.held[:0], q.held[n:]...)
		q.Kick() // a wait here may be for these sends' completions
	}
	if len(q.held) > 0 {
		q.timer = time.AfterFunc(time.Until(q.held[0].due), q.postDue)
	}
}

func (q *faultQP) Destroy() error {
	q.destroyed.Store(true)
	q.mu.Lock()
	q.stop = true
	if q.timer != nil {
		q.timer.Stop()
	}
	q.mu.Unlock()
	return q.QP.Destroy()
}
