package stream

import (
	"errors"

	"github.com/rnet-dev/rnet/internal/ring"
)

// The Observer hears once of each connection whose peer vanished, whichever
// of the ways to learn it comes first: keepalives that went unacknowledged,
// the connection manager's disconnect without the peer's DISCONNECT, or a
// failed completion that blames the peer's side (seen by the next tick or
// by Close). What fails after Close has begun is the close's own doing and
// is not told.

// peerGoneLocked returns the error that ended c if it matches
// ring.ErrPeerGone and the Observer has not heard of it yet; the caller
// passes it to tellPeerGone once c.mu is released.
func (c *Conn) peerGoneLocked() error {
	// A path that is being replaced failed, not the peer: a resume that
	// gives up puts the path back up, with its cause, before it fails.
	if c.peerGoneTold || c.pathDownLocked() {
		return nil
	}
	// The engine's error is the one calls return (a fatal error also
	// fails the engine, unless the engine failed first).
	err := c.eng.Err()
	if err == nil {
		err = c.fatal
	}
	if err == nil || !errors.Is(err, ring.ErrPeerGone) {
		return nil
	}
	c.peerGoneTold = true
	return err
}

// tellPeerGone tells the Observer that c's peer vanished with err, if err
// is not nil; c.mu must not be held.
func (c *Conn) tellPeerGone(err error) {
	if err != nil && c.set.Observer != nil {
		c.set.Observer.PeerGone(c, err)
	}
}
