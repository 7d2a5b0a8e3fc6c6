package stream

import (
	"net"

	"github.com/rnet-dev/rnet/internal/ring"
)

// Snapshot is what a connection counted, read at one moment: the engine's
// counters, the driver's own and the rings' sizes then.
type Snapshot struct {
	Engine ring.Stats
	// CQPolls counts polls of the completion queue, each one crossing
	// into C; Spins the waits that polled in a loop, Parks the waits that
	// parked until the completion channel or another caller woke them;
	// HandOffs the times the completion wait passed to another of the
	// connection's goroutines (a queued call, the pusher); SpinsDeferred
	// the waits that parked without spinning because another connection
	// on the same CQ spun, or because the queue pair allows no spin (a
	// path resumed over TCP), SpinsLeft the spins that ended early because
	// their polls woke another connection's waiter (see SpinSharer).
	CQPolls, Spins, Parks, HandOffs, SpinsDeferred, SpinsLeft uint64
	SendRingSize, RecvRingSize                                int
	// Resume counts the connection's resumes (see Settings.Resumer).
	Resume ResumeStats
}

// Stats returns a snapshot of the connection's counters.
func (c *Conn) Stats() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Snapshot{Engine: c.eng.Stats(), CQPolls: c.polls, Spins: c.spins, Parks: c.parks, HandOffs: c.handOffs,
		SpinsDeferred: c.spinsDeferred, SpinsLeft: c.spinsLeft, Resume: c.resumeStats}
	s.SendRingSize, s.RecvRingSize = c.eng.RingSizes()
	return s
}

// EngineConfig is the engine's configuration: Settings.Ring with every
// default applied, queue depths as the device allowed and the inline size
// it granted.
func (c *Conn) EngineConfig() ring.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eng.Config()
}

// Settings returns the settings the connection runs with: those it was
// started with, KeepAlive and Linger as SetKeepAlive and SetLinger changed
// them, Ring.Autocork as SetAutocork did.
func (c *Conn) Settings() Settings {
	c.mu.Lock()
	defer c.mu.Unlock()
	set := c.set
	set.KeepAlive, set.Linger = c.keepAlive, c.linger
	set.Ring.Autocork = c.eng.Autocork()
	return set
}

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

// WithQueuePair calls f with the queue pair the connection runs over now,
// holding the connection's lock, so that no resume replaces and destroys
// it while f uses it; after Close it fails with net.ErrClosed instead, the
// queue pair being destroyed. f must not call the Conn's methods.
func (c *Conn) WithQueuePair(f func(QueuePair)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return c.opError("info", net.ErrClosed)
	}
	f(c.qp)
	return nil
}

// QueuePair returns the queue pair the connection runs over: for what
// outlives the queue pair's destruction (its type, fields set at setup);
// calls into the device go through WithQueuePair.
func (c *Conn) QueuePair() QueuePair {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.qp
}
