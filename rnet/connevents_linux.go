//go:build linux && cgo

package rnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/rnet-dev/rnet/internal/lockcount"
	"github.com/rnet-dev/rnet/internal/stream"

	"github.com/rnet-dev/rnet/internal/cm"
)

// establishedEvents carries the connection manager's events of every
// established connection in the process. A connection's id moves onto its
// one shared channel once the handshake is done, so an established
// connection holds no event-channel fd and no goroutine of its own for them;
// its handshake still uses a channel of its own, which the kernel's
// per-channel queue keeps apart from other handshakes.
var establishedEvents = newConnEvents()

// connEvents is one shared connection-manager event channel, read by one
// goroutine that hands each event to its connection's handler. It exists
// while connections are attached: the first attach makes it, the last
// detach closes it.
//
// Handlers run on a goroutine per connection with events pending, in the
// order the events came, so a connection whose handler waits (for its own
// lock, say) delays neither the reader nor other connections.
type connEvents struct {
	mu lockcount.Mutex // guards every field below and every eventSub's fields
	// handled is signalled when a connection's pending events are done.
	handled sync.Cond
	ch      *cm.EventChannel
	// readerDone is closed when the reader of ch has returned.
	readerDone chan struct{}
	subs       map[*cm.ID]*eventSub
}

func newConnEvents() *connEvents {
	m := &connEvents{}
	m.handled.L = &m.mu
	return m
}

// eventSub is one attached connection. Its fields are guarded by
// connEvents.mu.
type eventSub struct {
	h      stream.EventHandler
	device string
	queue  []cm.EventType
	// delivering: a goroutine is handing queue to h.
	delivering bool
}

// attach moves id from its own channel (from) onto the shared one and
// delivers its events to h from then on; events the kernel held for id
// move with it. On failure id stays on from, and the caller keeps reading
// it there.
func (m *connEvents) attach(id *cm.ID, device string, h stream.EventHandler) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ch == nil {
		ch, err := cm.NewEventChannel()
		if err != nil {
			return err
		}
		m.ch, m.readerDone = ch, make(chan struct{})
		m.subs = make(map[*cm.ID]*eventSub)
		go m.read(ch, m.readerDone)
	}
	// Known before the move, so that the reader, which must take mu to
	// look it up, cannot miss an event that arrives right after it.
	m.subs[id] = &eventSub{h: h, device: device}
	if err := id.Migrate(m.ch); err != nil {
		delete(m.subs, id)
		m.closeIfUnusedLocked()
		return err
	}
	return nil
}

// detach stops delivery to id's handler and returns once no handler call
// for it is running. Events for id that come later are dropped.
func (m *connEvents) detach(id *cm.ID) {
	m.mu.Lock()
	sub := m.subs[id]
	if sub == nil {
		m.mu.Unlock()
		return
	}
	delete(m.subs, id)
	sub.queue = nil
	for sub.delivering {
		m.handled.Wait()
	}
	done := m.closeIfUnusedLocked()
	m.mu.Unlock()
	if done != nil {
		<-done
	}
}

// closeIfUnusedLocked closes the channel once no connection is attached,
// and returns what to wait on for its reader to end (nil if still open).
func (m *connEvents) closeIfUnusedLocked() chan struct{} {
	if m.ch == nil || len(m.subs) > 0 {
		return nil
	}
	done := m.readerDone
	m.ch.Close()
	m.ch, m.readerDone, m.subs = nil, nil, nil
	return done
}

// read hands every event on ch to its connection until ch is closed.
func (m *connEvents) read(ch *cm.EventChannel, done chan struct{}) {
	defer close(done)
	var retry eventRetry
	stop := make(chan struct{}) // never closed: a closed channel ends Next instead
	for {
		ev, err := ch.Next(context.Background())
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Keep reading: a disconnect or a device removal must still
			// reach its connection.
			retry.wait(stop)
			continue
		}
		retry.reset()
		if ev.Type != cm.EventDisconnected && ev.Type != cm.EventDeviceRemoval {
			continue
		}
		m.mu.Lock()
		if sub := m.subs[ev.ID]; sub != nil {
			sub.queue = append(sub.queue, ev.Type)
			if !sub.delivering {
				sub.delivering = true
				go m.deliver(sub)
			}
		}
		m.mu.Unlock()
	}
}

// deliver hands sub's pending events to its handler, one at a time.
func (m *connEvents) deliver(sub *eventSub) {
	m.mu.Lock()
	for len(sub.queue) > 0 {
		t := sub.queue[0]
		sub.queue = sub.queue[1:]
		m.mu.Unlock()
		dispatchEvent(sub.h, t, sub.device)
		m.mu.Lock()
	}
	sub.delivering = false
	m.handled.Broadcast()
	m.mu.Unlock()
}

// dispatchEvent tells h what an event of type t on a connection of device
// means for it.
func dispatchEvent(h stream.EventHandler, t cm.EventType, device string) {
	switch t {
	case cm.EventDisconnected:
		h.TransportDisconnected()
	case cm.EventDeviceRemoval:
		watchRemoval(device)
		h.TransportFailed(fmt.Errorf("%w: %s", ErrDeviceRemoved, device))
	}
}
