package resume

import (
	"errors"

	"github.com/rnet-dev/rnet/internal/ring"
)

// The checks a peer's bytes can fail. Each is the Check of a *ProtocolError
// and can be tested with errors.Is.
var (
	// ErrShort: private data or an exchange message shorter than its
	// layout.
	ErrShort = errors.New("resume extension too short")
	// ErrVersion: an extension version this side does not speak, or an
	// offer of version 0.
	ErrVersion = errors.New("unsupported resume extension version")
	// ErrMalformed: a field outside its range: a lifetime of 0, an
	// address count above MaxAddrs, an address no dialer can use, reserved
	// bits or trailing bytes that are not zero.
	ErrMalformed = errors.New("malformed resume extension")
	// ErrCountOutOfRange: the peer's received count is below what its
	// credit updates already showed received, or above what was ever
	// sent, or says it saw the end of a stream that was not ended there.
	ErrCountOutOfRange = errors.New("received count outside the bytes this side still holds")
)

// ProtocolError reports a peer whose resume extension or exchange message
// breaks the specification. errors.Is matches its Check and
// ring.ErrProtocol, as for any other peer that breaks the protocol: the
// connection (or the resume attempt) is over.
type ProtocolError struct {
	Check  error
	Detail string // which field, and its value
}

func (e *ProtocolError) Error() string {
	s := "rnet resume: " + e.Check.Error()
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

func (e *ProtocolError) Unwrap() []error { return []error{e.Check, ring.ErrProtocol} }

func protoErr(check error, detail string) *ProtocolError {
	return &ProtocolError{Check: check, Detail: detail}
}

// Why a Table refuses to resume a connection. A listener tells the dialer
// only that it refused (the same reject whatever the reason, so that a
// stranger learns nothing of which tokens exist); these are for its own logs
// and counters.
var (
	// ErrUnknownToken: no connection has this token: a wrong one, one
	// already used by a resume that completed (a replay), or one whose
	// connection ended or expired and was forgotten.
	ErrUnknownToken = errors.New("resume token unknown (wrong, already used, or its connection ended)")
	// ErrExpired: the connection's path failed longer ago than the
	// table's lifetime.
	ErrExpired = errors.New("resume token expired")
	// ErrTableFull: the table holds its maximum of connections, none of
	// them expired; the new connection goes without resume.
	ErrTableFull = errors.New("resume table full (TableConfig.MaxEntries)")
)
