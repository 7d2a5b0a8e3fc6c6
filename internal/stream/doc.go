// Package stream drives one established rsocket connection: it turns Read,
// Write and Close into steps of the engine (internal/ring) over a
// QueuePair, and decides who waits for completions, who spins, when writes
// cork, when keepalives go and when deadlines pass. It knows nothing of
// devices, the connection manager or poll groups: a QueuePair hides them.
// Package rnet wraps a Conn in its public handle; internal/simqp provides a
// QueuePair over the simulated fabric for tests.
//
// # Locks
//
// A Conn's locks are taken in this order, each released in the function
// that took it:
//
//  1. readMu (Reads) or writeMu (Writes that go in parts): held for the
//     whole call, so concurrent Reads, or Writes, take turns;
//  2. mu: the engine and the queue pair (a resume replaces both), and the
//     state Read, Write, Close, the pusher, the timers and a resume
//     share; a Conn calls its QueuePair's Step, Collected,
//     CollectAll, AddRegion, RemoveRegion and Kick with mu held (Disconnect
//     sometimes too), so the queue pair's own locks come after it;
//  3. the queue pair's locks. On a device (package rnet's verbsQP) they
//     are the poll group's, in the order internal/pollgroup's doc gives,
//     then the verbs objects' (internal/verbs) and the connection
//     manager id's (internal/cm; a QP's lock before its id's, see cm.ID),
//     which call out to nothing else that locks.
//
// A Deadline's mu is taken without any of these, and calls its expired
// func (the current queue pair's Kick, read from an atomic pointer, not
// under mu) with it held. No lock is held across a park: a caller that
// blocks (wait.go) releases mu before it waits on a channel or on
// QueuePair.Wait, which is called with no lock held, on the queue pair read
// under mu. The transport calls EventHandler's methods with none of the
// Conn's locks held; they take mu.
//
// A resume (resume.go) runs on a goroutine of the Conn's, which holds no
// lock while it calls the Resumer's Resume, the Settings.Resumed callback,
// and the old and new queue pairs' Start, Shutdown and Destroy; it swaps
// the queue pair and engine under mu, owning the completion wait, so that
// nobody waits on the old queue pair once it is shut down. The Resumer's
// Forget is called with no lock held: from Close, from the resume's
// goroutine, or from a goroutine of its own when a step under mu finds the
// connection over.
package stream
