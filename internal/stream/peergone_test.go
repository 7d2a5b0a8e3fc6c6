package stream

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/wr"
)

// countingObserver counts what it hears of one connection.
type countingObserver struct{ peerGone atomic.Int32 }

func (o *countingObserver) Opened(*Conn) {}
func (o *countingObserver) Closed(*Conn) {}
func (o *countingObserver) PeerGone(_ *Conn, err error) {
	if errors.Is(err, ring.ErrPeerGone) {
		o.peerGone.Add(1)
	}
}

// TestPeerGoneToldOnce: the Observer hears once of a connection whose peer
// vanished, whether a failed completion, the transport's disconnect or
// both tell it, and whether a tick or Close finds it first; it does not
// hear of a connection that failed for a reason of its own when the
// transport's disconnect follows. Only the first end has the Observer.
func TestPeerGoneToldOnce(t *testing.T) {
	for _, tc := range []struct {
		name       string
		localFault bool // a local protection error, not the peer's side
		tick       bool // a keepalive tick comes before Close
		disconnect bool // the connection manager reports the transport gone
		want       int32
	}{
		{name: "completion", want: 1},
		{name: "completion then tick", tick: true, want: 1},
		{name: "completion then disconnect", disconnect: true, want: 1},
		{name: "completion, tick, disconnect", tick: true, disconnect: true, want: 1},
		{name: "local error then disconnect", localFault: true, disconnect: true, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var obs countingObserver
			set := testSettings(nil)
			a, b, err := simqp.Pair(set.Ring, clientAddr, serverAddr)
			if err != nil {
				t.Fatal(err)
			}
			observed := set
			observed.Observer = &obs
			c, s := Start(a.QP, a.Engine, observed), Start(b.QP, b.Engine, set)
			defer s.Close()
			if tc.localFault {
				a.QP.Endpoint().InjectError(wr.WCLocProtErr)
			} else {
				b.QP.Endpoint().Vanish()
			}
			c.SetWriteDeadline(time.Now().Add(time.Minute))
			for err == nil {
				_, err = c.Write([]byte("anyone there?"))
			}
			var ce *ring.CompletionError
			if !errors.As(err, &ce) || errors.Is(err, ring.ErrPeerGone) == tc.localFault {
				t.Fatalf("Write = %v, want a completion error that matches ErrPeerGone only if the peer's side failed", err)
			}
			if tc.tick {
				c.tick()
				if got := obs.peerGone.Load(); got != tc.want {
					t.Errorf("after a tick, PeerGone heard %d times, want %d", got, tc.want)
				}
			}
			if tc.disconnect {
				c.TransportDisconnected()
			}
			c.Close()
			if got := obs.peerGone.Load(); got != tc.want {
				t.Errorf("PeerGone heard %d times, want %d", got, tc.want)
			}
		})
	}
}
