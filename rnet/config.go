package rnet

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/stream"
)

// Config tunes one connection. A nil *Config means every default below,
// which are rsocket's built-in values, so that rnet and C peers size their
// rings alike. Zero in any field means its default.
type Config struct {
	// SendBufferSize is the most the registered send ring, where written
	// bytes wait until the peer has them, grows to (see IdleBufferSize).
	// Default 128 KiB; range 64 B to 1 GiB.
	SendBufferSize int `json:"send_buffer_size"`
	// RecvBufferSize is the most the registered receive ring the peer
	// writes into, advertised in two halves, grows to. Default 128 KiB;
	// range 64 B to 1 GiB.
	RecvBufferSize int `json:"recv_buffer_size"`
	// IdleBufferSize is the size both rings start at and shrink back to
	// after a quiet keepalive period, so that an idle connection pins
	// little memory. A ring grows, four times at a step up to its maximum,
	// when the stream fills it: a Write that finds the send ring full, or
	// the peer filling a whole half of the receive ring in one transfer. A
	// receive ring moves only when the peer has used the space it was
	// granted, so one that was never busy never grows, and a peer that goes
	// idle holding grants of a large ring keeps it until it uses them. On
	// iWARP the receive ring stays at RecvBufferSize. Default 16 KiB; range
	// 64 B to 1 GiB; a value at least a ring's maximum keeps that ring
	// fixed.
	IdleBufferSize int `json:"idle_buffer_size"`
	// SendQueueSize is the send queue depth, 4 of which carry control
	// messages. Default 255 (rsocket's is 384: 255 entries fill a power of
	// two, a quarter of the kernel memory on rxe); range 16 to 65534,
	// lowered to what the device allows.
	SendQueueSize int `json:"send_queue_size"`
	// RecvQueueSize is the credit window: how many messages the peer may
	// send before Read consumes them. Default 384; range 16 to 65534. On a
	// device whose poll groups share a receive queue (RoCE, InfiniBand)
	// it is the most the window grows to: it starts at 32 and doubles
	// while the peer keeps using it up and the queue has receives to spare.
	RecvQueueSize int `json:"recv_queue_size"`
	// InlineThreshold is the largest transfer copied into the work request
	// itself rather than read by the NIC from the send ring, which cuts
	// small messages' latency. Default 48 bytes (rsocket's is 64: with 48 a
	// send queue entry fits 256 bytes on rxe, not 512); negative turns it
	// off; capped at what the device grants.
	InlineThreshold int `json:"inline_threshold"`
	// BusyPoll is how long a Read or Write that would block spins on the
	// completion queue before it parks, as rsocket's polling_time: CPU for
	// latency. Default 10 µs; negative turns spinning off. A very long
	// value (a minute) polls until the data comes, as rstream does. A
	// streaming reader whose spins rarely catch data stops spinning. Of
	// the connections of one poll group (those on one device in one
	// process, see docs/design.md) one caller spins at a time, for them
	// all: another wait of the group, the same connection's Write while
	// its Read spins too, parks instead, and a spin that hands another
	// connection its completions ends there.
	BusyPoll time.Duration `json:"busy_poll_ns"`
	// BusyPollLimit is the longest a Read that waits for the answer to its
	// own Write may spin: about twice the recent reply time, at least as
	// long as a park has been measured to cost. Default 250 µs, raised to
	// the measured cost of a park up to 2 ms; a positive value is a fixed
	// limit; negative keeps every spin at BusyPoll.
	BusyPollLimit time.Duration `json:"busy_poll_limit_ns"`
	// KeepAlive is the idle period after which a keepalive (a zero-byte
	// RDMA write) probes the peer; a peer that leaves sends unacknowledged
	// for three periods (twenty while it may lack posted receives, as a
	// busy C rsocket peer does) is declared gone, and told so at once.
	// Default 15 s; negative turns keepalives off. A connection that
	// agreed to Resume probes at least every ResumeTimeout/3, so that an
	// end that only receives finds a failed path before the listener stops
	// waiting for it.
	KeepAlive time.Duration `json:"keep_alive_ns"`
	// Linger bounds how long Close waits for written data to reach the
	// peer; past it Close drops the rest, the peer sees ErrPeerGone and
	// Close returns ErrAborted. With Resume, a path that fails meanwhile
	// is resumed within it. Default 10 s; negative drops unsent data at
	// once, as TCP's SetLinger(0).
	Linger time.Duration `json:"linger_ns"`
	// HandshakeTimeout bounds the waits of a connection's handshake on
	// the network, so that a peer that is gone costs each side a bounded
	// time. A Dial waits at most this long, in all, for the peer's address
	// to resolve and for the reply to its connection request, and then
	// fails with a *NoAnswerError: a host that is powered off, frozen or
	// cut off answers neither, while one that is up refuses at once what
	// it does not take. A listener waits at most this long for an accepted
	// connection's last handshake message (the dialer's RTU), so a peer
	// that vanishes midway costs nothing lasting. Default 10 s: the
	// connection manager resends its request, and its reply, about every
	// 4 s, so a handshake survives two lost messages, while a shorter
	// bound would fail dials over a lossy path and drop connections whose
	// dialer already counts them up (under a flood of requests that never
	// complete, ListenConfig's MaxPendingHandshakes, not this, frees their
	// slots). Negative leaves both sides to the connection manager's own
	// retries (about a minute); a positive value must be at least 100 ms.
	// The Dialer's Timeout and its context bound the whole dial as well.
	HandshakeTimeout time.Duration `json:"handshake_timeout_ns"`
	// AckTimeout is how long the transport waits for an acknowledgement
	// before it resends (the queue pair's local ACK timeout): on a lossy
	// wire, each loss that no later packet reveals costs this long. The
	// device takes 4.096 µs × 2^n, rnet the smallest n giving at least
	// this; at most 2h26m (n = 31). Default 33.5 ms on Soft-RoCE (rxe),
	// where the timer is the only recovery and 7 retries mean without
	// limit (134 ms on a queue pair that a resume built, see Resume);
	// elsewhere the connection manager's, since adapters recover
	// from loss themselves and give up after AckTimeout × (RetryCount+1),
	// so that one as short would fail connections across a switch failover
	// (docs/performance.md). Negative: the connection manager's everywhere.
	// It sets this side's queue pair only; iWARP ignores it.
	AckTimeout time.Duration `json:"ack_timeout_ns"`
	// RetryCount is how often the transport resends an unacknowledged
	// packet before the connection fails with ErrPeerGone, so that
	// AckTimeout × (RetryCount+1) is how long a silent peer or a cut wire
	// is borne. Default 7, the most (0 means the default), or 6 when
	// Resume is set, since Soft-RoCE (rxe) retries without limit at 7 and
	// a cut wire would then be found only by the keepalive; negative means
	// none. The dialling side's value applies to both ends (the connection
	// request carries it); a Listener's is not used. iWARP ignores it.
	RetryCount int `json:"retry_count"`
	// RNRRetryCount is how often the peer resends a message that found no
	// receive posted on this side: rnet's credits never let that happen,
	// and C rsocket peers rely on it. Default 7, which means without limit
	// (0 means the default); negative means none; at most 7. The connection
	// request and reply carry each side's to the other. iWARP ignores it.
	// Below 7, connections keep receive queues of their own rather than
	// share their poll group's (see docs/design.md, "Poll groups").
	RNRRetryCount int `json:"rnr_retry_count"`
	// NoDelay turns autocorking off: each Write is posted as soon as
	// credits allow, as rsocket does. Default false (autocorking on):
	// while a transfer of the connection is in flight, small Writes wait
	// in the send ring and go out together, in one RDMA write, when it
	// completes, when they fill a transfer, or when a Read or Write is
	// about to wait, so a request and its reply never wait on the cork.
	// As TCP_NODELAY, it trades message rate for a Write's own latency.
	NoDelay bool `json:"no_delay"`
	// TrafficClass is the IP TOS byte (DSCP << 2, ECN in the low two bits)
	// of the connection's packets on RoCE, which a lossless fabric maps to
	// a priority; the kernel derives the Ethernet priority (the service
	// level) from it. Default: the connection manager's, 0 unless the
	// device's default_roce_tos was set in configfs; range 1 to 255;
	// negative means 0. The dialling side's applies to both ends: the
	// connection request carries it, and the accepting side's queue pair
	// takes the request's, so a Listener's is not used. iWARP
	// ignores it, and InfiniBand takes its service level from the subnet
	// manager's path record. See docs/config.md.
	TrafficClass int `json:"traffic_class"`
	// Resume lets a connection between two rnet peers that both set it
	// outlive its path: when its queue pair fails (a cut wire, a port
	// down, a device removed), the dialer connects again, through any
	// local device that reaches the address it dialled or one the
	// listener named, and the stream goes on with no byte lost or
	// repeated. Reads and Writes wait meanwhile, at most ResumeTimeout;
	// their deadlines still apply. A C rsocket peer, or an rnet peer
	// without it, gets an ordinary connection, though a dialer's default
	// RetryCount is then 6 all the same. A failed path is seen when the
	// transport's retries run out (on rxe about 7 × AckTimeout, a quarter
	// second by default, a second on a path that a resume built), on a
	// device's or port's event, or when the keepalive finds the peer
	// gone. What it costs: each side keeps sent
	// bytes in its send ring until the peer's credit updates show them
	// received, not only until they left, so a stream needs a
	// larger SendBufferSize for the same rate (docs/performance.md), and
	// the connection keeps a receive queue of its own rather than share
	// its poll group's. Whoever sees the connection manager's messages
	// on the path can take the connection over (docs/design.md, "What the
	// token does not protect against"): run TLS over it where the path is
	// not trusted. With Dialer.TCPFallback, to a DualListener, the last
	// resort is TCP to the port dialled, once no RDMA path is left.
	// Default false.
	Resume bool `json:"resume"`
	// ResumeTimeout bounds one resume, from the failure of the path to
	// the stream moving again on a new one; past it the connection fails
	// with an error that lists each address tried and why. A listener
	// keeps the connection, waiting for its dialer, twice as long (at
	// least 10 s). Only with Resume. Default 5 s; range 100 ms to 1 min.
	// Raise it where many connections may resume at once on a busy host:
	// each builds a queue pair and waits for the listener's answer, and in
	// the two-host lab the slowest of a hundred took up to 10 s.
	ResumeTimeout time.Duration `json:"resume_timeout_ns"`
}

// Bounds of Config.ResumeTimeout: the listener's table keeps a connection
// twice as long, at most resume.MaxTableLifetime.
const (
	defaultResumeTimeout = 5 * time.Second
	minResumeTimeout     = 100 * time.Millisecond
	maxResumeTimeout     = time.Minute
)

// resumeRetryCount is Config.RetryCount's default with Resume: the most
// that Soft-RoCE does not take for "without limit", so that a cut wire
// fails the queue pair with a retry error, which the connection resumes.
const resumeRetryCount = cm.MaxRetryCount - 1

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
	reapDelay        time.Duration // see stream.Settings.ReapDelay
	busyPoll         time.Duration
	busyPollLimit    time.Duration // the spin limit, or its floor when adaptive
	busyPollLimitMax time.Duration // the ceiling of an adaptive spin limit
	keepAlive        time.Duration
	linger           time.Duration // 0: Close does not wait
	handshakeTimeout time.Duration // 0: no bound of our own
	transport        transportSettings
	// transportErr is a transport field out of range: Dial and Listen
	// fail with it.
	transportErr error
	// logger is the Dialer's or ListenConfig's Logger.
	logger *slog.Logger
	// resume offers (dialing) or takes offers of (listening) the resume
	// extension (Config.Resume, negotiate.go); resumeTimeout bounds one
	// resume (Config.ResumeTimeout with its default).
	resume        bool
	resumeTimeout time.Duration
	// tcpResume lets a dialer's resume go over TCP when no RDMA path is
	// left (Dialer.TCPFallback).
	tcpResume bool
}

// noDelay is Config.NoDelay of an engine configured with rc, as settings
// sets it: the engine speaks of autocorking, the API of turning it off.
func noDelay(rc ring.Config) bool { return !rc.Autocork }

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
			IdleBufferSize:  cfg.IdleBufferSize,
			Autocork:        !cfg.NoDelay,
		},
		reapDelay:        reapDelay,
		busyPoll:         orDefault(cfg.BusyPoll, 10*time.Microsecond),
		busyPollLimit:    orDefault(cfg.BusyPollLimit, defaultBusyPollLimit),
		busyPollLimitMax: orDefault(cfg.BusyPollLimit, maxBusyPollLimit),
		keepAlive:        orDefault(cfg.KeepAlive, stream.DefaultKeepAlive),
		linger:           orDefault(cfg.Linger, 10*time.Second),
		handshakeTimeout: orDefault(cfg.HandshakeTimeout, 10*time.Second),
		resume:           cfg.Resume,
		resumeTimeout:    orDefault(cfg.ResumeTimeout, defaultResumeTimeout),
	}
	if cfg.InlineThreshold < 0 {
		s.ring.InlineThreshold = ring.NoInline
	}
	s.transport, s.transportErr = cfg.transportSettings()
	if cfg.Resume && cfg.RetryCount == 0 {
		s.transport.retryCount = resumeRetryCount
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

// transportSettings are the reliable transport's settings of a Config, in
// the connection manager's units.
type transportSettings struct {
	ackTimeout    uint8 // n of 4.096 µs × 2^n that Config.AckTimeout asks for; 0 if it asks none
	ackTimeoutCM  bool  // Config.AckTimeout is negative: the connection manager's on every device
	retryCount    uint8
	rnrRetryCount uint8
	trafficClass  uint8 // the TOS byte Config.TrafficClass asks for
	setTraffic    bool  // Config.TrafficClass asks for one; else the connection manager's
	resumedPath   bool  // for a queue pair a resume builds (forResumedPath)
}

// forResumedPath is t for a queue pair that a resume builds, at either end.
func (t transportSettings) forResumedPath() transportSettings {
	t.resumedPath = true
	return t
}

// shareRecvs reports whether a connection may take its receives from its
// poll group's shared receive queue: only while a peer's message that
// finds the queue empty is retried without limit, since a peer that
// overruns its credits may empty it for a moment (see internal/pollgroup/srq.go).
func (t transportSettings) shareRecvs() bool { return t.rnrRetryCount == cm.MaxRetryCount }

// softRoCEAckTimeout is Config.AckTimeout's default exponent on Soft-RoCE:
// 33.5 ms. softRoCEResumedAckTimeout is its default on a queue pair that a
// resume built, 134 ms: with a resuming connection's 6 retries such a path
// bears about a second of silence rather than a quarter, since the wire it
// moved to now carries the failed one's streams too and both hosts are at
// their busiest, and a path that fails then costs its stream a second
// resume (docs/performance.md).
const (
	softRoCEAckTimeout        = 13
	softRoCEResumedAckTimeout = 15
)

// ackTimeoutOn is the exponent to give a queue pair on a device (on
// Soft-RoCE or not), or 0 to leave the timeout to the connection manager.
func (t transportSettings) ackTimeoutOn(softRoCE bool) uint8 {
	if t.ackTimeout == 0 && !t.ackTimeoutCM && softRoCE {
		if t.resumedPath {
			return softRoCEResumedAckTimeout
		}
		return softRoCEAckTimeout
	}
	return t.ackTimeout
}

// maxTrafficClass is the largest TOS byte.
const maxTrafficClass = 255

// ackTimeoutUnit is the IB local ACK timeout's unit, 4.096 µs.
const ackTimeoutUnit = 4096 * time.Nanosecond

// transportSettings checks and converts AckTimeout, RetryCount,
// RNRRetryCount and TrafficClass; an error is a *ConfigError.
func (c Config) transportSettings() (transportSettings, error) {
	var t transportSettings
	switch {
	case c.AckTimeout < 0:
		t.ackTimeoutCM = true
	case c.AckTimeout > 0:
		n, ok := ackTimeoutExponent(c.AckTimeout)
		if !ok {
			return t, &ConfigError{Field: "AckTimeout", Value: c.AckTimeout,
				Want: fmt.Sprintf("0 (the default), at most %v (4.096 µs × 2^%d), or negative to leave it to the connection manager",
					ackTimeoutUnit<<cm.MaxAckTimeout, cm.MaxAckTimeout)}
		}
		t.ackTimeout = n
	}
	var err error
	if t.retryCount, err = retryCount("RetryCount", c.RetryCount); err != nil {
		return t, err
	}
	if t.rnrRetryCount, err = retryCount("RNRRetryCount", c.RNRRetryCount); err != nil {
		return t, err
	}
	switch {
	case c.TrafficClass > maxTrafficClass:
		return t, &ConfigError{Field: "TrafficClass", Value: c.TrafficClass,
			Want: fmt.Sprintf("0 (the connection manager's), 1 to %d (the IP TOS byte, DSCP << 2), or negative for 0", maxTrafficClass)}
	case c.TrafficClass > 0:
		t.trafficClass, t.setTraffic = uint8(c.TrafficClass), true
	case c.TrafficClass < 0:
		t.setTraffic = true
	}
	return t, nil
}

// ackTimeoutExponent is the smallest n from 1 to 31 with 4.096 µs × 2^n >= d,
// if there is one.
func ackTimeoutExponent(d time.Duration) (uint8, bool) {
	for n := uint8(1); n <= cm.MaxAckTimeout; n++ {
		if ackTimeoutUnit<<n >= d {
			return n, true
		}
	}
	return 0, false
}

// retryCount maps a retry count field: 0 to the default (the most),
// negative to none; above the most is a *ConfigError for field.
func retryCount(field string, v int) (uint8, error) {
	switch {
	case v == 0:
		return cm.MaxRetryCount, nil
	case v < 0:
		return 0, nil
	case v > cm.MaxRetryCount:
		return 0, &ConfigError{Field: field, Value: v,
			Want: fmt.Sprintf("0 (the default, %d), 1 to %d, or negative for none", cm.MaxRetryCount, cm.MaxRetryCount)}
	}
	return uint8(v), nil
}

// ConfigError reports a Config field outside its range. Dial and Listen
// return it, inside a *net.OpError, before they touch a device.
type ConfigError struct {
	Field string // the field, e.g. "KeepAlive"
	Value any    // the value it had
	Want  string // the values it may take
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("rnet: Config.%s is %v: it must be %s", e.Field, e.Value, e.Want)
}

// The smallest keepalive period and handshake bound that make sense: a
// shorter keepalive re-arms its timer back to back and declares healthy
// peers gone, and a shorter handshake bound drops connections whose last
// message is merely late.
const (
	minKeepAlive        = time.Second
	minHandshakeTimeout = 100 * time.Millisecond
)

// validate checks every field of c against its documented range. A nil
// Config is valid.
func (c *Config) validate() error {
	if c == nil {
		return nil
	}
	sizes := []struct {
		field    string
		v        int
		lo, hi   int
		unit     string
		negative bool // a negative value has a meaning
	}{
		{"SendBufferSize", c.SendBufferSize, ring.MinBufSize, ring.MaxBufSize, " bytes", false},
		{"RecvBufferSize", c.RecvBufferSize, ring.MinBufSize, ring.MaxBufSize, " bytes", false},
		{"IdleBufferSize", c.IdleBufferSize, ring.MinBufSize, ring.MaxBufSize, " bytes", false},
		{"SendQueueSize", c.SendQueueSize, ring.MinQueueSize, ring.MaxQueueSize, "", false},
		{"RecvQueueSize", c.RecvQueueSize, ring.MinQueueSize, ring.MaxQueueSize, "", false},
		{"InlineThreshold", c.InlineThreshold, 1, ring.MaxInlineThreshold, " bytes", true},
	}
	for _, s := range sizes {
		if s.v == 0 || s.v < 0 && s.negative || s.v >= s.lo && s.v <= s.hi {
			continue
		}
		want := fmt.Sprintf("0 (the default) or from %d to %d%s", s.lo, s.hi, s.unit)
		if s.negative {
			want += ", or negative to turn it off"
		}
		return &ConfigError{Field: s.field, Value: s.v, Want: want}
	}
	durations := []struct {
		field string
		v, lo time.Duration
		off   string
	}{
		{"KeepAlive", c.KeepAlive, minKeepAlive, "to turn keepalives off"},
		{"HandshakeTimeout", c.HandshakeTimeout, minHandshakeTimeout, "for no bound of rnet's own"},
	}
	for _, d := range durations {
		if d.v > 0 && d.v < d.lo {
			return &ConfigError{Field: d.field, Value: d.v,
				Want: fmt.Sprintf("0 (the default), at least %v, or negative %s", d.lo, d.off)}
		}
	}
	if c.ResumeTimeout != 0 && (c.ResumeTimeout < minResumeTimeout || c.ResumeTimeout > maxResumeTimeout) {
		return &ConfigError{Field: "ResumeTimeout", Value: c.ResumeTimeout,
			Want: fmt.Sprintf("0 (the default, %v) or from %v to %v", defaultResumeTimeout, minResumeTimeout, maxResumeTimeout)}
	}
	_, err := c.transportSettings() // AckTimeout, RetryCount, RNRRetryCount, TrafficClass
	return err
}

// reapDelay is the driver's, which settings keep so that tests can raise it.
const reapDelay = stream.DefaultReapDelay
