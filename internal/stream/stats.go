package stream

import (
	"net"

	"github.com/rnet-dev/rnet/internal/ring"
)

// Stats counts what a connection did. Every counter only grows.
type Stats struct {
	BytesWritten     uint64 // accepted by Write
	BytesRead        uint64 // returned by Read
	BytesSent        uint64 // carried by RDMA writes to the peer
	BytesReceived    uint64 // written into our receive ring by the peer
	MessagesSent     uint64 // data transfers (RDMA writes with immediate)
	MessagesReceived uint64
	InlineSends      uint64 // transfers small enough to travel inside the work request
	// CoalescedWrites counts Writes whose bytes went out in one transfer
	// with bytes of an earlier Write (see rnet's Config.NoDelay).
	CoalescedWrites uint64

	CreditUpdatesSent     uint64
	CreditUpdatesReceived uint64
	KeepalivesSent        uint64

	// Stalls count the times data was waiting but could not go out.
	CreditStalls uint64 // the peer had granted no more messages
	BufferStalls uint64 // the peer had granted no more receive-ring space
	QueueStalls  uint64 // the send queue was full

	SendCompletions  uint64
	RecvCompletions  uint64
	ErrorCompletions uint64 // completions with an error status
	CQPolls          uint64 // polls of the completion queue (each one crossing into C)

	// How Reads, Writes and Close waited (see rnet's Config.BusyPoll): Spins
	// counts waits that polled the CQ in a loop, Parks the times a waiting
	// goroutine parked until the completion channel or another caller
	// woke it. A park on the channel costs one crossing into C (two for
	// the connection's first, which arms the CQ, and for one with work to
	// post first) and a wakeup through the netpoller, a spin one crossing
	// per round. A wait that finds the channel already signalled is no
	// park.
	Spins uint64
	Parks uint64

	// SendRingSize and RecvRingSize are the sizes of the rings now, not
	// counters: they start at rnet's Config.IdleBufferSize, grow up to
	// SendBufferSize and RecvBufferSize while the connection is busy, and
	// shrink back once it is quiet.
	SendRingSize int
	RecvRingSize int
	// RingGrowths and RingShrinks count the moves of either ring to a
	// larger or a smaller region.
	RingGrowths uint64
	RingShrinks uint64
	// RegionsDeclined counts the larger or smaller regions that could not
	// be registered (the locked-memory limit, say): the ring stayed as it
	// was, and the connection went on.
	RegionsDeclined uint64
	// CreditWindowGrowths counts the times the credit window (the
	// messages the peer may send ahead of our reading) grew. Only a
	// connection that takes its receives from its poll group's shared
	// receive queue starts with a small window and grows it, while the
	// queue has receives to spare (see docs/design.md, "Poll groups").
	CreditWindowGrowths uint64
}

// Stats returns a snapshot of the connection's counters.
func (c *Conn) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.eng.Stats()
	st := Stats{
		BytesWritten:          s.BytesWritten,
		BytesRead:             s.BytesRead,
		BytesSent:             s.BytesSent,
		BytesReceived:         s.BytesReceived,
		MessagesSent:          s.MessagesSent,
		MessagesReceived:      s.MessagesReceived,
		InlineSends:           s.InlineSends,
		CoalescedWrites:       s.CoalescedWrites,
		CreditUpdatesSent:     s.CreditUpdatesSent,
		CreditUpdatesReceived: s.CreditUpdatesReceived,
		KeepalivesSent:        s.KeepalivesSent,
		CreditStalls:          s.CreditStalls,
		BufferStalls:          s.BufferStalls,
		QueueStalls:           s.QueueStalls,
		SendCompletions:       s.SendCompletions,
		RecvCompletions:       s.RecvCompletions,
		ErrorCompletions:      s.ErrorCompletions,
		CQPolls:               c.polls,
		Spins:                 c.spins,
		Parks:                 c.parks,
		RingGrowths:           s.SendRingGrowths + s.RecvRingGrowths,
		RingShrinks:           s.SendRingShrinks + s.RecvRingShrinks,
		RegionsDeclined:       s.RegionsDeclined,
		CreditWindowGrowths:   s.CreditWindowGrowths,
	}
	st.SendRingSize, st.RecvRingSize = c.eng.RingSizes()
	return st
}

// EngineConfig is the engine's configuration: Settings.Ring with every
// default applied, queue depths as the device allowed and the inline size
// it granted.
func (c *Conn) EngineConfig() ring.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eng.Config()
}

// Settings returns the settings the connection was started with.
func (c *Conn) Settings() Settings { return c.set }

// EngineInfo is what Info reports of the engine.
type EngineInfo struct {
	Config                     ring.Config
	CreditWindow               int
	SendRingSize, RecvRingSize int
}

// Info reports the engine's configuration and sizes now; after Close it
// fails with net.ErrClosed.
func (c *Conn) Info() (EngineInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return EngineInfo{}, c.opError("info", net.ErrClosed)
	}
	info := EngineInfo{Config: c.eng.Config(), CreditWindow: c.eng.CreditWindow()}
	info.SendRingSize, info.RecvRingSize = c.eng.RingSizes()
	return info, nil
}

// QueuePair returns the queue pair the connection runs over.
func (c *Conn) QueuePair() QueuePair { return c.qp }
