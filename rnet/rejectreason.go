package rnet

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// An rnet listener that refuses a connection request says why in the
// reject's private data, so that an rnet dialer's error can name the cause
// instead of a bare "connection rejected", and can tell a busy listener,
// worth trying again, from one that will not have it. C rsocket dialers
// never read reject private data (rs_do_connect turns any REJECTED event
// into ECONNREFUSED), and a C listener rejects with none, so neither side
// is confused by it.
//
// The dialer is a stranger who has not yet shown it is real, so the reject
// names only the reason: the listener's limits, what a connection pins
// there and its errno go to its own HandshakeError hook, never on the wire.
//
// Version 1 is 6 bytes:
//
//	offset size
//	0      4    magic "rnet"
//	4      1    version (1)
//	5      1    reason code (rejectCode)
//
// Later versions may append fields and keep these; a decoder reads the
// fields it knows from any version >= 1. The connection manager may pad the
// data with zeros (InfiniBand and RoCE carry 148 bytes in a REJ). The peer
// is untrusted, and anyone on the path can forge a reject: the decoder
// checks the length and turns the code into text of its own, never passing
// the peer's bytes through, and a reject decides only this dial (see
// lastingRefusal).
const (
	rejectMagic      = "rnet"
	rejectVersion    = 1
	rejectReasonSize = 6
)

// rejectCode is why a listener refused a connection request.
type rejectCode uint8

const (
	rejectBusy         rejectCode = 1 // the backlog of established connections is full
	rejectBadRequest   rejectCode = 2 // the request's private data was unusable
	rejectLockedMemory rejectCode = 3 // the locked-memory limit stopped a registration
	rejectResources    rejectCode = 4 // another failure setting the connection up
	rejectPendingFull  rejectCode = 5 // every pending-handshake slot is taken, and the line for one is full
	// rejectResumeRefused: a request to resume a connection (resume
	// extension) that the listener does not resume: the same for a wrong,
	// replayed or expired token and for a listener that resumes none, so
	// that a stranger learns nothing of which tokens exist.
	rejectResumeRefused rejectCode = 6
)

// rejectReason is the decoded private data of a reject.
type rejectReason struct {
	code rejectCode
}

// busy reports whether the listener refused for want of room it will have
// again shortly, so that the dialer may try again.
func (r rejectReason) busy() bool { return r.code == rejectBusy || r.code == rejectPendingFull }

// errBacklogFull is what a listener tells its HandshakeError hook when it
// refuses a request because its backlog of established connections
// waiting for Accept is full, and errEvicted when it gave up a handshake
// whose dialer had not confirmed it, for a newer request.
var (
	errBacklogFull = errors.New("rnet: the backlog of connections waiting for Accept is full (ListenConfig.Backlog)")
	errEvicted     = errors.New("rnet: the dialer did not confirm the handshake before a newer request needed its slot (ListenConfig.MaxPendingHandshakes)")
)

// rejectReasonOf classifies the listener-side failure err.
func rejectReasonOf(err error) rejectReason {
	var lm *verbs.LockedMemoryError
	switch {
	case errors.As(err, &lm):
		return rejectReason{rejectLockedMemory}
	case errors.Is(err, errBacklogFull):
		return rejectReason{rejectBusy}
	case errors.Is(err, errHandshakesBusy):
		return rejectReason{rejectPendingFull}
	case errors.Is(err, errResumeRefused):
		return rejectReason{rejectResumeRefused}
	case errors.Is(err, ErrProtocol):
		return rejectReason{rejectBadRequest}
	}
	return rejectReason{rejectResources}
}

func (r rejectReason) encode() []byte {
	b := make([]byte, rejectReasonSize)
	copy(b, rejectMagic)
	b[4] = rejectVersion
	b[5] = byte(r.code)
	return b
}

// decodeRejectReason reads a reject's private data; ok is false when it
// does not hold a reason in this format (a C listener's reject, or bytes
// too short or of another format).
func decodeRejectReason(b []byte) (r rejectReason, ok bool) {
	if len(b) < rejectReasonSize || string(b[:4]) != rejectMagic || b[4] < rejectVersion {
		return rejectReason{}, false
	}
	return rejectReason{code: rejectCode(b[5])}, true
}

// String says, for the dialer, why the listener refused.
func (r rejectReason) String() string {
	switch r.code {
	case rejectBusy:
		return "the listener is busy: its backlog of connections waiting for Accept is full"
	case rejectPendingFull:
		return "the listener is busy: its line of connection requests waiting for a handshake is full"
	case rejectBadRequest:
		return "the listener could not use the connection request (not rsocket protocol version 1, or malformed)"
	case rejectLockedMemory:
		return "the listener is out of locked memory (its RLIMIT_MEMLOCK is too low for another connection; " +
			"the listener's HandshakeError names the limit to raise)"
	case rejectResources:
		return "the listener could not set up the connection (the listener's HandshakeError says why)"
	case rejectResumeRefused:
		return "the listener refused to resume the connection (its token is unknown or expired there, " +
			"or the listener does not resume connections)"
	}
	return "the listener gave reason code " + strconv.Itoa(int(r.code))
}

// peerRejectError is a reject from an rnet listener that said why. It
// unwraps to the *RejectError, so errors.As and ECONNREFUSED still match.
type peerRejectError struct {
	reason rejectReason
	addr   string // the address dialled
	err    error  // the *cm.RejectError, or the *RejectError made of it
}

func (e *peerRejectError) Error() string {
	return "rdma_connect " + e.addr + ": rejected by the peer: " + e.reason.String()
}

func (e *peerRejectError) Unwrap() error { return e.err }

// explainReject gives a dial error that is a reject carrying a reason the
// reason's text; any other error is returned as it is.
func explainReject(err error) error {
	var re *cm.RejectError
	if !errors.As(err, &re) {
		return err
	}
	r, ok := decodeRejectReason(re.PrivateData)
	if !ok {
		return err
	}
	return &peerRejectError{reason: r, addr: re.Addr, err: re}
}

// errHandshakesBusy is what a listener tells its HandshakeError hook when
// it refuses a request because every pending-handshake slot is held by a
// handshake too young to give up and the line of requests waiting for one
// is full.
var errHandshakesBusy = errors.New("rnet: every pending-handshake slot is taken and the line of requests waiting for one is full (ListenConfig.MaxPendingHandshakes, ListenConfig.Backlog)")

// A listener that is busy (its Accept backlog full, or its line of
// requests waiting for a pending-handshake slot full) refuses a request at
// once, and says so in the reject. A dial so refused tries again, as a TCP
// client resends its SYN to a full accept queue: after about
// busyRetryFirst, then twice as long each time up to busyRetryMax, each
// wait drawn at random from its upper half so that a burst of dials
// refused together does not come back together; for as long as its context
// allows, and for at most busyRetryFor. A dial whose context would end
// before its next try returns the busy reject instead, so that its caller
// (a falling-back DialConn, say) learns that the listener was busy rather
// than that time ran out.
const (
	busyRetryFirst = 10 * time.Millisecond
	busyRetryMax   = 250 * time.Millisecond
	busyRetryFor   = 10 * time.Second
)

// dialRetryingBusy calls dialOnce until it connects or fails for another
// reason than a busy listener, as above.
func dialRetryingBusy(ctx context.Context, dialOnce func(context.Context) (*Conn, error)) (*Conn, error) {
	start := time.Now()
	delay := busyRetryFirst
	for {
		c, err := dialOnce(ctx)
		if err == nil || !refusedAsBusy(err) {
			return c, err
		}
		wait := delay/2 + rand.N(delay/2+1)
		if time.Since(start)+wait > busyRetryFor {
			return nil, err
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= wait {
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			// Fails at once with the context's error, as a dial whose
			// context ended must.
			return dialOnce(ctx)
		}
		delay = min(2*delay, busyRetryMax)
	}
}

// refusedAsBusy reports whether err is a reject from an rnet listener that
// was busy.
func refusedAsBusy(err error) bool {
	var pe *peerRejectError
	return errors.As(err, &pe) && pe.reason.busy()
}
