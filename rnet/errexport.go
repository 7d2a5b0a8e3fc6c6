package rnet

import (
	"errors"
	"io"
	"net"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/verbs"
)

// exportError is err as rnet's exported functions return it: the internal
// packages' typed errors in its chain replaced by the exported types of
// errors.go, with the same text and the same errors.Is matches. Code inside
// the package works on the internal errors and calls this where an error
// leaves it.
func exportError(err error) error {
	if err == nil || err == io.EOF || !holdsInternal(err) {
		return err
	}
	return exported(err)
}

// holdsInternal reports whether err's chain holds an error exportError
// replaces.
func holdsInternal(err error) bool {
	var (
		pe *ring.ProtocolError
		ce *ring.CompletionError
		de *verbs.Error
		le *verbs.LockedMemoryError
		re *cm.RejectError
	)
	return errors.As(err, &pe) || errors.As(err, &ce) || errors.As(err, &de) ||
		errors.As(err, &le) || errors.As(err, &re)
}

// exported rebuilds err's chain with exported types, keeping wrappers
// rnet knows as they are and standing in for others with exportedCause.
func exported(err error) error {
	switch e := err.(type) {
	case nil:
		return nil
	case *ring.ProtocolError:
		return &ProtocolError{Check: e.Check, Msg: uint32(e.Msg), Detail: e.Detail}
	case *ring.CompletionError:
		return &CompletionError{ID: e.ID, Status: CompletionStatus(e.Status), VendorErr: e.VendorErr, Recv: e.Recv}
	case *verbs.Error:
		return &DeviceError{Op: e.Op, Device: e.Device, Addr: e.Addr, Errno: e.Errno, Err: exported(e.Err)}
	case *verbs.LockedMemoryError:
		return &LockedMemoryError{Soft: e.Soft, Hard: e.Hard, Pinned: e.Pinned, Region: e.Region, Needed: e.Needed}
	case *cm.RejectError:
		return &RejectError{Addr: e.Addr, Status: e.Status, PrivateData: e.PrivateData}
	case *net.OpError:
		oe := *e
		oe.Err = exported(e.Err)
		return &oe
	case *peerRejectError:
		return &peerRejectError{reason: e.reason, addr: e.addr, err: exported(e.err)}
	case fallbackError:
		return fallbackError{tcp: e.tcp, rdma: exported(e.rdma)}
	case *NoAnswerError:
		n := *e
		n.Err = exported(e.Err)
		return &n
	case *rememberedRefusal:
		r := *e
		r.err = exported(e.err)
		return &r
	case interface{ Unwrap() error }:
		if !holdsInternal(err) {
			return err
		}
		return &exportedCause{err: err, causes: []error{exported(e.Unwrap())}}
	case interface{ Unwrap() []error }:
		if !holdsInternal(err) {
			return err
		}
		var causes []error
		for _, c := range e.Unwrap() {
			causes = append(causes, exported(c))
		}
		return &exportedCause{err: err, causes: causes}
	}
	return err
}

// exportedCause stands for a wrapper exportError does not know (one of
// fmt.Errorf's, say): its text, with the causes exported.
type exportedCause struct {
	err    error
	causes []error
}

func (e *exportedCause) Error() string   { return e.err.Error() }
func (e *exportedCause) Unwrap() []error { return e.causes }

// Timeout is the wrapper's own, when it has one.
func (e *exportedCause) Timeout() bool {
	t, ok := e.err.(interface{ Timeout() bool })
	return ok && t.Timeout()
}
