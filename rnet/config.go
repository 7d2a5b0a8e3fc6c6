package rnet

import (
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// Config tunes one connection. A nil *Config means every default below, which
// are rsocket's built-in values so that rnet and C peers size their rings alike.
type Config struct {
	// SendBufferSize is the registered send ring: written bytes wait here
	// until the peer has acknowledged them. 0 means 128 KiB.
	SendBufferSize int
	// RecvBufferSize is the registered receive ring the peer writes into,
	// advertised in two halves. 0 means 128 KiB.
	RecvBufferSize int
	// SendQueueSize is the send queue depth; 4 entries are kept for control
	// messages. 0 means 384, clamped to what the device allows.
	SendQueueSize int
	// RecvQueueSize is the credit window: how many messages the peer may
	// send before Read has consumed them. 0 means 384.
	RecvQueueSize int
	// InlineThreshold is the largest transfer copied into the work request
	// itself instead of being read by the NIC from the send ring; it cuts
	// latency for small messages. 0 means 64 bytes, a negative value turns
	// inline sends off. It is capped at what the device grants.
	InlineThreshold int
	// BusyPoll is how long a Read or Write that would block spins on the
	// completion queue before parking the goroutine, trading CPU for
	// latency like rsocket's polling_time. 0 means 10 µs; negative disables
	// spinning (and BusyPollLimit with it). A very long BusyPoll (a minute,
	// say) polls until the data comes, as rstream's default nonblocking
	// loop does: the lowest latency, for one core per waiting call. Spins
	// still end at the call's deadline and at Close. A Read that is not
	// waiting for a reply (a streaming reader) stops spinning while fewer
	// than one spin in eight catches its data, and every 16th such Read
	// spins to find out whether that changed.
	BusyPoll time.Duration
	// BusyPollLimit lets a Read's spin grow past BusyPoll on a connection
	// whose replies come quickly: a Read that waits for the answer to a
	// Write (request and response) spins for twice the recent average of
	// such waits, or for as long as a park and wakeup has been measured to
	// cost when that is longer (spinning any shorter than a park costs
	// saves nothing), but never longer than this. Where a park and wakeup
	// costs more than the wait itself (request/response traffic, slow or
	// virtualised machines) this keeps the goroutine off the netpoller; a
	// connection whose waits are longer than half the limit spins only
	// BusyPoll, except that now and then (at most every 16th wait) it spins
	// the whole limit to find out whether replies got quicker. 0 means
	// 250 µs, raised to the measured cost of a park where that is higher,
	// up to 2 ms: on hardware a park costs far less than 250 µs, under
	// emulation 0.6-1 ms. A positive value is a fixed limit; negative keeps
	// the spin at BusyPoll.
	BusyPollLimit time.Duration
	// KeepAlive is the idle period after which a keepalive (a zero-byte
	// RDMA write the peer's software never sees) probes the peer; a dead
	// peer then fails the connection once the transport's retries run out,
	// or after three periods in which sends went unacknowledged (some
	// devices retry for ever). While our sends may be waiting for a busy
	// C rsocket peer to post receives, which it does only when its
	// application calls in, that takes twenty periods instead. 0 means
	// 15 s, like net.Dialer; negative disables keepalives.
	KeepAlive time.Duration
	// Linger bounds how long Close waits for written data to reach the
	// peer before it discards the rest, tears the connection down (the peer
	// sees ErrPeerGone, not io.EOF) and returns ErrAborted. 0 means 10 s;
	// negative means Close does not wait at all, as TCP's SetLinger(0):
	// anything unsent is discarded at once.
	Linger time.Duration
	// HandshakeTimeout bounds a listener's handshake with one incoming
	// connection, so a peer that vanishes mid-handshake costs nothing
	// lasting. The dialer already counts itself connected while the
	// listener waits for the connection manager's last message (RTU), which
	// the CM retries over seconds when it is lost, so a short bound drops
	// connections the peer is already using. 0 means 30 s; negative means
	// no bound but the connection manager's own retries.
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
		handshakeTimeout: orDefault(cfg.HandshakeTimeout, 30*time.Second),
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
