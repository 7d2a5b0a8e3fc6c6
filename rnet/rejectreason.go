package rnet

import (
	"encoding/binary"
	"errors"
	"strconv"
	"syscall"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// An rnet listener that refuses a connection request says why in the
// reject's private data, so that an rnet dialer's error can name the cause
// instead of a bare "connection rejected". C rsocket dialers never read
// reject private data (rs_do_connect turns any REJECTED event into
// ECONNREFUSED), and a C listener rejects with none, so neither side is
// confused by it.
//
// Version 1 is 24 bytes, big-endian:
//
//	offset size
//	0      4    magic "rnet"
//	4      1    version (1)
//	5      1    reason code (rejectCode)
//	6      2    errno of the listener's failure, 0 if none
//	8      8    rejectLockedMemory: the listener's RLIMIT_MEMLOCK soft limit in bytes
//	16     8    rejectLockedMemory: the bytes a connection end pins there
//
// Later versions may append fields and keep these; a decoder reads the
// fields it knows from any version >= 1. The connection manager may pad the
// data with zeros (InfiniBand and RoCE carry 148 bytes in a REJ), and 24
// bytes fit every transport's limit. The peer is untrusted: the decoder
// checks the length and turns every value into text of its own, never
// passing the peer's bytes through.
const (
	rejectMagic      = "rnet"
	rejectVersion    = 1
	rejectReasonSize = 24
	maxRejectedErrno = 1<<16 - 1
)

// rejectCode is why a listener refused a connection request.
type rejectCode uint8

const (
	rejectBusy         rejectCode = 1 // the backlog of established connections is full
	rejectBadRequest   rejectCode = 2 // the request's private data was unusable
	rejectLockedMemory rejectCode = 3 // the locked-memory limit stopped a registration
	rejectResources    rejectCode = 4 // another failure setting the connection up
)

// rejectReason is the decoded private data of a reject.
type rejectReason struct {
	code   rejectCode
	errno  syscall.Errno
	limit  uint64 // rejectLockedMemory only
	needed uint64 // rejectLockedMemory only
}

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
	var r rejectReason
	var errno syscall.Errno
	if errors.As(err, &errno) && errno <= maxRejectedErrno {
		r.errno = errno
	}
	var lm *verbs.LockedMemoryError
	switch {
	case errors.As(err, &lm):
		r.code, r.limit, r.needed = rejectLockedMemory, lm.Soft, uint64(max(lm.Needed, 0))
	case errors.Is(err, errBacklogFull):
		r.code = rejectBusy
	case errors.Is(err, ErrProtocol):
		r.code = rejectBadRequest
	default:
		r.code = rejectResources
	}
	return r
}

func (r rejectReason) encode() []byte {
	b := make([]byte, rejectReasonSize)
	copy(b, rejectMagic)
	b[4] = rejectVersion
	b[5] = byte(r.code)
	binary.BigEndian.PutUint16(b[6:], uint16(r.errno))
	binary.BigEndian.PutUint64(b[8:], r.limit)
	binary.BigEndian.PutUint64(b[16:], r.needed)
	return b
}

// decodeRejectReason reads a reject's private data; ok is false when it
// does not hold a reason in this format (a C listener's reject, or bytes
// too short or of another format).
func decodeRejectReason(b []byte) (r rejectReason, ok bool) {
	if len(b) < rejectReasonSize || string(b[:4]) != rejectMagic || b[4] < rejectVersion {
		return rejectReason{}, false
	}
	return rejectReason{
		code:   rejectCode(b[5]),
		errno:  syscall.Errno(binary.BigEndian.Uint16(b[6:])),
		limit:  binary.BigEndian.Uint64(b[8:]),
		needed: binary.BigEndian.Uint64(b[16:]),
	}, true
}

// String says, for the dialer, why the listener refused.
func (r rejectReason) String() string {
	var s string
	switch r.code {
	case rejectBusy:
		s = "the listener's backlog of connections waiting for Accept is full"
	case rejectBadRequest:
		s = "the listener could not use the connection request (not rsocket protocol version 1, or malformed)"
	case rejectLockedMemory:
		s = "the listener could not register memory (locked-memory limit: RLIMIT_MEMLOCK is " +
			verbs.FormatBytes(r.limit) + " there, and a connection pins " + verbs.FormatBytes(r.needed) +
			"; raise the listener's limit)"
	case rejectResources:
		s = "the listener could not set up the connection"
	default:
		s = "the listener gave reason code " + strconv.Itoa(int(r.code))
	}
	if r.errno != 0 && r.code != rejectLockedMemory {
		s += " (" + r.errno.Error() + ")"
	}
	return s
}

// peerRejectError is a reject from an rnet listener that said why. It
// unwraps to the *RejectError, so errors.As and ECONNREFUSED still match.
type peerRejectError struct {
	reason rejectReason
	err    *cm.RejectError
}

func (e *peerRejectError) Error() string {
	return "rdma_connect " + e.err.Addr + ": rejected by the peer: " + e.reason.String()
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
	return &peerRejectError{reason: r, err: re}
}
