package rnet

import (
	"fmt"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

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
	_, err := c.transportSettings() // AckTimeout, RetryCount, RNRRetryCount, TrafficClass
	return err
}
