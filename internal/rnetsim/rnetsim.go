// Package rnetsim is the bridge from package rnettest to package rnet's
// constructors over the simulated fabric. Package rnet registers them when
// it initialises; rnettest, which imports rnet, takes them back with the
// types filled in. It keeps rnet's public API free of test-only
// constructors: the only way in is this internal package, which programs
// outside the module cannot import.
package rnetsim

import (
	"fmt"
	"net/netip"
)

// Hooks are rnet's constructors, over its Config, Conn and Listener types.
type Hooks[Config, Conn, Listener any] struct {
	// Pair connects two Conns over a fresh simulated fabric: the first at
	// address client, the second at server, both configured by cfg (nil
	// for the defaults), which it checks as Dial does.
	Pair func(cfg *Config, client, server netip.AddrPort) (*Conn, *Conn, error)
	// Listen makes a Listener at addr holding up to backlog established
	// connections, and the function that queues one for its Accept:
	// false when the backlog is full or the Listener is closed, and the
	// caller then closes the connection. The Listener's Close calls stop
	// first.
	Listen func(addr netip.AddrPort, backlog int, stop func()) (*Listener, func(*Conn) bool)
}

var registered any

// Register records package rnet's hooks; rnet calls it from init.
func Register[Config, Conn, Listener any](h Hooks[Config, Conn, Listener]) { registered = h }

// Get returns the hooks Register recorded, with the types rnet gave them.
func Get[Config, Conn, Listener any]() Hooks[Config, Conn, Listener] {
	h, ok := registered.(Hooks[Config, Conn, Listener])
	if !ok {
		panic(fmt.Sprintf("rnetsim: package rnet registered %T, not the hooks asked for", registered))
	}
	return h
}
