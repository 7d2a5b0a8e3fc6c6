package stream

import (
	"context"

	"github.com/rnet-dev/rnet/internal/ring"
)

// A temporary copy of the interface between package rnet and the driver's
// resume (drive43's internal/stream/resume.go), so that rnet's resumers
// compile before that lands. Drop this file, and the Settings fields below
// it, at the merge.

// ResumeRequest is what a Conn gives its Resumer when its path has failed.
type ResumeRequest struct {
	// Own is this side's exchange: the fresh engine's BeginResume(Own), before Establish.
	Own [ring.ExchangeSize]byte
	// Ring configures the fresh engine: the old engine's, with IdleBufferSize at least
	// its send ring, since TakeOver copies the held bytes.
	Ring ring.Config
	// Cause is why the old path failed.
	Cause error
}

// Resumer moves a connection whose queue pair failed onto a new one, to the same
// peer (the resume extension, docs/design.md). Package rnet makes one per agreed
// connection: the dialer's connects again, the listener's waits for the dialer.
type Resumer interface {
	// Resume returns a new queue pair to the peer and its fresh engine, established,
	// on which BeginResume(req.Own) was called before Establish; or an error once no
	// path is left or ctx is done (ctx carries Settings.ResumeTimeout). It runs on a
	// goroutine of its own, without the Conn's locks, once per failure.
	Resume(ctx context.Context, req ResumeRequest) (QueuePair, *ring.Engine, error)
	// Forget says the connection has ended for good (closed, failed, or its peer
	// disconnected): the resumer releases what it holds (the listener's token).
	Forget()
}

// PathFailed is the listener's resumer's call when a valid resume request
// comes for a connection whose path still looks healthy. The driver's own
// does the work; this placeholder does nothing.
func (c *Conn) PathFailed(cause error) {}
