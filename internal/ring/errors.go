package ring

import (
	"errors"
	"strconv"

	"github.com/rnet-dev/rnet/internal/wr"
)

// ErrProtocol is matched (errors.Is) by every *ProtocolError: the peer broke
// the rsocket protocol and the connection is over.
var ErrProtocol = errors.New("rsocket protocol violation")

// The checks a peer can fail. Each is the Check of a *ProtocolError and can
// be tested with errors.Is.
var (
	// ErrShortConnData: private data shorter than ConnDataSize.
	ErrShortConnData = errors.New("private data too short")
	// ErrVersion: private data version is not 1.
	ErrVersion = errors.New("unsupported rsocket version")
	// ErrBadConnData: private data fields unusable (no credits, a target
	// SGL that is not 2 entries, an empty or overflowing data buffer).
	ErrBadConnData = errors.New("invalid private data")
	// ErrDataOverrun: a DATA message claims more bytes than remain in the
	// half of rbuf the peer was granted (or arrives with nothing granted).
	ErrDataOverrun = errors.New("DATA exceeds granted receive buffer")
	// ErrCreditOverrun: the peer sent more DATA messages than credits granted.
	ErrCreditOverrun = errors.New("more messages than credits granted")
	// ErrReservedOpcode: opcode 1, 3, 5 or WRITE (2) received.
	ErrReservedOpcode = errors.New("reserved opcode")
	// ErrBadControl: a CTRL message with an unknown code.
	ErrBadControl = errors.New("unknown control message")
	// ErrUnexpectedSGL: the peer wrote a target SGL entry the engine still
	// uses, or out of the alternating order.
	ErrUnexpectedSGL = errors.New("unexpected SGL update")
	// ErrBadSGL: an SGL update whose length, key or address is not the half
	// of rbuf the protocol says comes next.
	ErrBadSGL = errors.New("SGL update does not match")
	// ErrBadCredits: a credit grant that takes back credits already used or
	// grants more than the peer's receive queue.
	ErrBadCredits = errors.New("invalid credit grant")
	// ErrUnexpectedIOMap: IOMAP_SGL received, but no iomap was advertised.
	ErrUnexpectedIOMap = errors.New("IOMAP_SGL without an iomap")
	// ErrBadMessage: a receive completion that cannot carry an rsocket
	// message (no immediate, wrong length, wrong opcode for the transport).
	ErrBadMessage = errors.New("malformed message")
	// ErrDataAfterShutdown: DATA after the peer's own SHUTDOWN.
	ErrDataAfterShutdown = errors.New("DATA after SHUTDOWN")
	// ErrDataAfterDisconnect: DATA after the peer's own DISCONNECT, which
	// promised there would be no more.
	ErrDataAfterDisconnect = errors.New("DATA after DISCONNECT")
)

// Errors that are not the peer's fault.
var (
	// ErrCompletion is matched by every *CompletionError.
	ErrCompletion = errors.New("work completion error")
	// ErrPeerGone: the peer disconnected without DISCONNECT, or its side
	// failed a transfer (see CompletionError.PeerSide).
	ErrPeerGone = errors.New("rdma: peer disconnected abruptly")
	// ErrUnknownCompletion: a completion whose ID is not the one the engine
	// expects next (a driver bug: completions of one QP come in order).
	ErrUnknownCompletion = errors.New("unexpected work completion")
	// ErrWriteClosed: Write after CloseWrite or Close.
	ErrWriteClosed = errors.New("write side closed")
	// ErrClosed: Read after Close.
	ErrClosed = errors.New("connection closed")
	// ErrAborted: Abort dropped written data that had not been sent.
	ErrAborted = errors.New("closed with written data unsent")
	// ErrPeerDisconnected: Write after the peer sent DISCONNECT (the
	// equivalent of ECONNRESET).
	ErrPeerDisconnected = errors.New("connection reset by peer")
	// ErrNotEstablished: Establish was not called (or failed).
	ErrNotEstablished = errors.New("connection not established")
	// ErrEstablished: Establish called twice.
	ErrEstablished = errors.New("connection already established")
)

// ProtocolError reports a peer that broke the protocol. Check is one of the
// Err* sentinels above; errors.Is matches both it and ErrProtocol.
type ProtocolError struct {
	Check  error
	Msg    Msg    // the offending message word, when there is one
	Detail string // human-readable specifics
}

func (e *ProtocolError) Error() string {
	s := "rsocket: " + e.Check.Error()
	switch {
	case e.Msg != 0 && e.Detail != "":
		s += " (" + e.Msg.String() + ": " + e.Detail + ")"
	case e.Msg != 0:
		s += " (" + e.Msg.String() + ")"
	case e.Detail != "":
		s += " (" + e.Detail + ")"
	}
	return s
}

func (e *ProtocolError) Unwrap() []error { return []error{e.Check, ErrProtocol} }

func protoErr(check error, m Msg, detail string) *ProtocolError {
	return &ProtocolError{Check: check, Msg: m, Detail: detail}
}

// CompletionError reports a work completion with an error status while the
// connection was up: a dead or unreachable peer (retry exceeded), a remote
// access error, a flush, an injected fault.
type CompletionError struct {
	ID        uint64
	Status    wr.WCStatus
	VendorErr uint32
	Recv      bool // the failed work request was a receive
}

func (e *CompletionError) Error() string {
	kind := "send"
	if e.Recv {
		kind = "receive"
	}
	return "rsocket: " + kind + " completion failed: " + e.Status.Description() +
		" (vendor error 0x" + strconv.FormatUint(uint64(e.VendorErr), 16) + ")"
}

// Unwrap lets errors.Is match ErrCompletion, and ErrPeerGone when the
// status blames the peer's side.
func (e *CompletionError) Unwrap() []error {
	if e.Status.PeerSide() {
		return []error{ErrCompletion, ErrPeerGone}
	}
	return []error{ErrCompletion}
}
