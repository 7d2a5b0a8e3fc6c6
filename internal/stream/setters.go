package stream

import (
	"net"
	"time"
)

// DefaultKeepAlive is the keepalive period when none is given.
const DefaultKeepAlive = 15 * time.Second

// SetAutocork turns autocorking on or off (see autocork.go); off, what it
// holds back goes out now.
func (c *Conn) SetAutocork(on bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return c.opError("set", net.ErrClosed)
	}
	if on != c.eng.Autocork() {
		c.eng.SetAutocork(on)
		if !on {
			c.driveLocked()
		}
	}
	return nil
}

// SetKeepAlive turns keepalives on, at the last period given (Settings'
// KeepAlive, SetKeepAlivePeriod, or DefaultKeepAlive), or off; the
// housekeeping tick goes on either way.
func (c *Conn) SetKeepAlive(on bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return c.opError("set", net.ErrClosed)
	}
	period := time.Duration(0)
	if on {
		period = c.keepAlivePeriod
	}
	c.setKeepAliveLocked(period)
	return nil
}

// SetKeepAlivePeriod sets the keepalive period (positive) and turns
// keepalives on.
func (c *Conn) SetKeepAlivePeriod(period time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return c.opError("set", net.ErrClosed)
	}
	c.keepAlivePeriod = period
	c.setKeepAliveLocked(period)
	return nil
}

// setKeepAliveLocked makes period (off unless positive) the keepalive
// period, the next tick coming a period from now.
func (c *Conn) setKeepAliveLocked(period time.Duration) {
	if period == c.keepAlive || period <= 0 && c.keepAlive <= 0 {
		return
	}
	c.keepAlive = period
	c.keepaliveStalls = 0
	c.keepaliveQuietSince = keepaliveNow()
	c.lastTick = c.keepaliveQuietSince
	if c.keepalive != nil {
		c.keepalive.Reset(c.tickPeriod())
	}
}

// HoldCredits stops (true) or resumes (false) the credit updates this end
// sends, so that its peer runs out of credits (see ring.HoldCredits).
func (c *Conn) HoldCredits(hold bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eng.HoldCredits(hold)
	if !hold {
		c.driveLocked()
	}
}

// SetLinger sets what Close does with written data the peer has not taken,
// as TCP's SO_LINGER: sec > 0 waits for it up to sec seconds, sec == 0
// drops it at once, sec < 0 restores the Linger the connection started
// with.
func (c *Conn) SetLinger(sec int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return c.opError("set", net.ErrClosed)
	}
	switch {
	case sec < 0:
		c.linger = c.set.Linger
	case sec == 0:
		c.linger = 0
	default:
		c.linger = time.Duration(sec) * time.Second
	}
	return nil
}
