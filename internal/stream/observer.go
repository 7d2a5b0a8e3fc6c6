package stream

// Observer hears of the events in a connection's life that package rnet
// counts and logs. Its methods are called without the connection's lock
// held, from whichever goroutine saw the event, so they must be safe for
// concurrent use and return promptly.
type Observer interface {
	// Opened: Start has begun driving c.
	Opened(c *Conn)
	// PeerGone: c failed with err, which matches ring.ErrPeerGone: its
	// keepalives went unacknowledged, the transport went down without the
	// peer's DISCONNECT, or a completion failed on the peer's side. It is
	// called at most once for c, and not for what fails after Close began;
	// it may come after Closed, when a tick found the peer gone just as
	// Close ran.
	PeerGone(c *Conn, err error)
	// Closed: Close has released c's queue pair.
	Closed(c *Conn)
}
