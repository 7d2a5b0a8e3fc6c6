package stream

import (
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// Settings are what a Conn runs with, every default applied: package rnet
// fills them from its Config.
type Settings struct {
	// Ring configures the engine; Ring.Autocork turns autocorking on.
	Ring ring.Config
	// ReapDelay is how long after a transfer was posted that a Write
	// behind it corks rather than reap first: DefaultReapDelay, raised by
	// tests that hold completions back (see corkWindow).
	ReapDelay time.Duration
	// BusyPoll is how long a blocked call spins before it parks; 0 turns
	// spinning off.
	BusyPoll time.Duration
	// BusyPollLimit is the longest spin of a Read that waits for a reply,
	// or its floor when a measured park raises it; BusyPollLimitMax is the
	// ceiling of that rise (see waitEstimate).
	BusyPollLimit    time.Duration
	BusyPollLimitMax time.Duration
	// KeepAlive is the keepalive period; 0 turns keepalives off.
	KeepAlive time.Duration
	// Linger bounds how long Close waits for the peer to take what was
	// written; 0 means Close does not wait.
	Linger time.Duration
	// Observer, if not nil, hears of the connection's opening, its peer
	// vanishing and its close.
	Observer Observer
	// RingResized, if not nil, is told of each region a ring moved to (a
	// larger one, or a smaller one once quiet), or could not register
	// (err), on a goroutine of its own: the step that registers it holds
	// the connection's lock.
	RingResized func(c *Conn, kind ring.RegionKind, size int, err error)
	// Resumer, if not nil, resumes the connection on a new queue pair
	// when its path fails (resume.go); nil: a failed path ends it.
	Resumer Resumer
	// ResumeTimeout bounds one resume, from the failure to the stream
	// moving again; DefaultResumeTimeout if not positive.
	ResumeTimeout time.Duration
	// MaxResumes bounds the resumes that may start within 4 ×
	// ResumeTimeout, so that a peer cannot keep the connection resuming
	// (each of its valid resume requests is one); past it a failed path
	// fails the connection. DefaultMaxResumes if not positive.
	MaxResumes int
	// Resumed, if not nil, is told of each resume that completed: what
	// found the path failed, how long the resume took, and how many
	// bytes this side has sent again over all of the connection's
	// resumes. It is called without the connection's locks, on the
	// goroutine that resumed.
	Resumed func(c *Conn, cause ResumeCause, took time.Duration, resentTotal uint64)
	// ResumeFailed, if not nil, is told of a resume that gave up, with
	// the error that now fails the connection; called as Resumed is.
	ResumeFailed func(c *Conn, err *ResumeError)
}
