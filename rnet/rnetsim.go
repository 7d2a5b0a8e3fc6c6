package rnet

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/rnet-dev/rnet/internal/rnetsim"
	"github.com/rnet-dev/rnet/internal/stream"
)

// Package rnettest runs connections over the simulated fabric and hands them
// out through these functions, its only way in, so that package rnet
// exports nothing for it.
func init() {
	rnetsim.Settings = simSettings
	rnetsim.NewConn = func(c *stream.Conn, cfg any) (net.Conn, error) {
		set, err := configSettings(cfg)
		if err != nil {
			return nil, err
		}
		return newHandle(c, set.handshakeTimeout), nil
	}
	rnetsim.Listen = func(addr netip.AddrPort, backlog int, stop func()) (net.Listener, func(net.Conn) bool) {
		l, offer := simListen(addr, backlog, stop)
		return l, func(c net.Conn) bool {
			h, ok := c.(*Conn)
			return ok && offer(h)
		}
	}
}

// configSettings is settings for a Config from outside, which Dial would
// check; cfg must be a *Config.
func configSettings(cfg any) (settings, error) {
	c, ok := cfg.(*Config)
	if !ok {
		return settings{}, fmt.Errorf("rnet: %T is not an *rnet.Config", cfg)
	}
	if err := c.validate(); err != nil {
		return settings{}, err
	}
	return c.settings(), nil
}

// simSettings is configSettings for the driver.
func simSettings(cfg any) (stream.Settings, error) {
	set, err := configSettings(cfg)
	if err != nil {
		return stream.Settings{}, err
	}
	return set.streamSettings(), nil
}

// simListen returns a Listener at addr with room for backlog established
// connections, and the function that queues one for its Accept: false when
// the backlog is full or the Listener closed, and the caller then closes the
// connection. The Listener's Close calls stop before closing what is queued.
func simListen(addr netip.AddrPort, backlog int, stop func()) (*Listener, func(*Conn) bool) {
	l := &listener{
		addr:     netAddr(addr),
		conns:    make(chan *Conn, backlog),
		done:     make(chan struct{}),
		failed:   make(chan struct{}),
		acceptDL: stream.NewDeadline(func() {}),
		stop:     stop,
	}
	l.requestsDone.L = &l.requestsMu
	offer := func(c *Conn) bool {
		select {
		case <-l.done:
			return false
		default:
		}
		select {
		case l.conns <- c:
			return true
		default:
			l.counts.backlogDrops.Add(1)
			return false
		}
	}
	return newListener(l), offer
}
