package rnet

import (
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// Config tunes one connection. A nil *Config means every default below,
// which are rsocket's built-in values, so that rnet and C peers size their
// rings alike. Zero in any field means its default.
type Config struct {
	// SendBufferSize is the registered send ring, where written bytes wait
	// until the peer has them. Default 128 KiB; range 64 B to 1 GiB.
	SendBufferSize int
	// RecvBufferSize is the registered receive ring the peer writes into,
	// advertised in two halves. Default 128 KiB; range 64 B to 1 GiB.
	RecvBufferSize int
	// SendQueueSize is the send queue depth, 4 of which carry control
	// messages. Default 384; range 16 to 65534, lowered to what the device
	// allows.
	SendQueueSize int
	// RecvQueueSize is the credit window: how many messages the peer may
	// send before Read consumes them. Default 384; range 16 to 65534.
	RecvQueueSize int
	// InlineThreshold is the largest transfer copied into the work request
	// itself rather than read by the NIC from the send ring, which cuts
	// small messages' latency. Default 64 bytes; negative turns it off;
	// capped at what the device grants.
	InlineThreshold int
	// BusyPoll is how long a Read or Write that would block spins on the
	// completion queue before it parks, as rsocket's polling_time: CPU for
	// latency. Default 10 µs; negative turns spinning off. A very long
	// value (a minute) polls until the data comes, as rstream does. A
	// streaming reader whose spins rarely catch data stops spinning.
	BusyPoll time.Duration
	// BusyPollLimit is the longest a Read that waits for the answer to its
	// own Write may spin: about twice the recent reply time, at least as
	// long as a park has been measured to cost. Default 250 µs, raised to
	// the measured cost of a park up to 2 ms; a positive value is a fixed
	// limit; negative keeps every spin at BusyPoll.
	BusyPollLimit time.Duration
	// KeepAlive is the idle period after which a keepalive (a zero-byte
	// RDMA write) probes the peer; a peer that leaves sends unacknowledged
	// for three periods (twenty while it may lack posted receives, as a
	// busy C rsocket peer does) is declared gone. Default 15 s; negative
	// turns keepalives off.
	KeepAlive time.Duration
	// Linger bounds how long Close waits for written data to reach the
	// peer; past it Close drops the rest, the peer sees ErrPeerGone and
	// Close returns ErrAborted. Default 10 s; negative drops unsent data at
	// once, as TCP's SetLinger(0).
	Linger time.Duration
	// HandshakeTimeout bounds a listener's wait for an accepted
	// connection's last handshake message (the dialer's RTU), so a peer
	// that vanishes midway costs nothing lasting. Default 10 s: the
	// connection manager resends its reply about every 4 s until the RTU
	// comes, so a connection survives two lost RTUs, while a shorter bound
	// would drop connections whose dialer already counts them up (under a
	// flood of requests that never complete, ListenConfig's
	// MaxPendingHandshakes, not this, frees their slots). Negative leaves
	// it to the connection manager's own retries (about a minute); a
	// positive value must be at least 100 ms.
	HandshakeTimeout time.Duration
}

// defaultBusyPollLimit is the spin limit of a connection that has not
// measured a park costing more, and maxBusyPollLimit the most a measured
// park may raise it to (see Config.BusyPollLimit).
const (
	defaultBusyPollLimit = 250 * time.Microsecond
	maxBusyPollLimit     = 2 * time.Millisecond
)

// settings is a Config with every default applied.
type settings struct {
	ring             ring.Config
	busyPoll         time.Duration
	busyPollLimit    time.Duration // the spin limit, or its floor when adaptive
	busyPollLimitMax time.Duration // the ceiling of an adaptive spin limit
	keepAlive        time.Duration
	linger           time.Duration // 0: Close does not wait
	handshakeTimeout time.Duration // 0: no bound of our own
}

func (c *Config) settings() settings {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	s := settings{
		ring: ring.Config{
			SendBufferSize:  cfg.SendBufferSize,
			RecvBufferSize:  cfg.RecvBufferSize,
			SendQueueSize:   cfg.SendQueueSize,
			RecvQueueSize:   cfg.RecvQueueSize,
			InlineThreshold: cfg.InlineThreshold,
		},
		busyPoll:         orDefault(cfg.BusyPoll, 10*time.Microsecond),
		busyPollLimit:    orDefault(cfg.BusyPollLimit, defaultBusyPollLimit),
		busyPollLimitMax: orDefault(cfg.BusyPollLimit, maxBusyPollLimit),
		keepAlive:        orDefault(cfg.KeepAlive, 15*time.Second),
		linger:           orDefault(cfg.Linger, 10*time.Second),
		handshakeTimeout: orDefault(cfg.HandshakeTimeout, 10*time.Second),
	}
	if cfg.InlineThreshold < 0 {
		s.ring.InlineThreshold = ring.NoInline
	}
	s.ring = s.ring.Normalize()
	return s
}

// orDefault maps 0 to def and a negative duration to 0 (disabled).
func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}
