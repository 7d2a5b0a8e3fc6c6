package rnet

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"syscall"
	"testing"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simqp"
	"github.com/rnet-dev/rnet/internal/stream"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// The typed errors are rnet's own, so that go doc shows their fields and
// users can name every field's type.
func TestErrorTypesDeclaredInRnet(t *testing.T) {
	for _, typ := range []reflect.Type{
		reflect.TypeFor[ProtocolError](), reflect.TypeFor[CompletionError](), reflect.TypeFor[DeviceError](),
		reflect.TypeFor[LockedMemoryError](), reflect.TypeFor[RejectError](), reflect.TypeFor[CompletionStatus](),
	} {
		if pkg := reflect.TypeFor[Conn]().PkgPath(); typ.PkgPath() != pkg {
			t.Errorf("%v is declared in %s, want %s", typ, typ.PkgPath(), pkg)
		}
	}
}

// corruptingQP rewrites the message word of the data transfers it posts
// into a reserved opcode, as a broken peer would send.
type corruptingQP struct{ *simqp.QP }

func (q corruptingQP) Step(flags wr.StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	for i := range sends {
		if sends[i].Op == wr.OpWriteImm && ring.Msg(sends[i].Imm).Op() == ring.MsgData {
			sends[i].Imm = uint32(ring.MakeMsg(ring.MsgRsvd, ring.Msg(sends[i].Imm).Data()))
		}
	}
	return q.QP.Step(flags, recvs, sends, out, tries)
}

func TestSimProtocolErrorAs(t *testing.T) {
	c, s := simPipeWrap(t, nil, func(q *simqp.QP) stream.QueuePair { return corruptingQP{q} })
	defer c.Close()
	defer s.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	_, err := s.Read(make([]byte, 16))
	var pe *ProtocolError
	if !errors.As(err, &pe) {
		t.Fatalf("Read of a reserved opcode = %v (%T), want a *ProtocolError", err, err)
	}
	if !errors.Is(err, ErrProtocol) || !errors.Is(pe.Check, ring.ErrReservedOpcode) || pe.Msg>>29 != uint32(ring.MsgRsvd) {
		t.Errorf("ProtocolError %+v: want ErrProtocol, Check reserved opcode, Msg with opcode %d", pe, ring.MsgRsvd)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" {
		t.Errorf("%v: want it inside a read *net.OpError", err)
	}
}

func TestSimCompletionErrorAs(t *testing.T) {
	c, s := simPipe(t, &Config{NoDelay: true})
	defer c.Close()
	defer s.Close()
	simQPOf(c).Endpoint().InjectError(wr.WCRetryExcErr)
	_, err := c.Write([]byte("hello"))
	if err == nil {
		_, err = c.Read(make([]byte, 16))
	}
	var ce *CompletionError
	if !errors.As(err, &ce) {
		t.Fatalf("I/O after a failed completion = %v (%T), want a *CompletionError", err, err)
	}
	if ce.Status != WCRetryExcErr || ce.Status.Name() != "IBV_WC_RETRY_EXC_ERR" || !ce.Status.PeerSide() || !errors.Is(err, ErrPeerGone) {
		t.Errorf("CompletionError %+v: want status WCRetryExcErr, on the peer's side, matching ErrPeerGone", ce)
	}
}

// A setup refused by the locked-memory limit, as setup_linux.go returns it
// and the HandshakeError hook and Dial pass it on.
func TestExportLockedMemoryError(t *testing.T) {
	internal := fmt.Errorf("rnet: rxe0: recv ring of 65536 bytes: %w", &verbs.Error{Op: "ibv_reg_mr", Device: "rxe0", Errno: syscall.ENOMEM,
		Err: &verbs.LockedMemoryError{Soft: 64 << 10, Hard: 64 << 10, Pinned: 60 << 10, Region: 65536, Needed: 200000}})
	err := exportError(dialError(t.Context(), nil, nil, internal))
	if err.Error() != dialError(t.Context(), nil, nil, internal).Error() {
		t.Errorf("exported text %q differs from %q", err, internal)
	}
	var de *DeviceError
	var lm *LockedMemoryError
	if !errors.As(err, &de) || de.Op != "ibv_reg_mr" || de.Device != "rxe0" || de.Errno != syscall.ENOMEM {
		t.Errorf("%v: want a *DeviceError for ibv_reg_mr on rxe0 with ENOMEM, got %+v", err, de)
	}
	if !errors.As(err, &lm) || lm.Needed != 200000 || lm.Soft != 64<<10 {
		t.Errorf("%v: want a *LockedMemoryError with its limits, got %+v", err, lm)
	}
	if !errors.Is(err, ErrLockedMemory) || !errors.Is(err, syscall.ENOMEM) {
		t.Errorf("%v: want it to match ErrLockedMemory and ENOMEM", err)
	}
	var ilm *verbs.LockedMemoryError
	if errors.As(err, &ilm) {
		t.Errorf("%v: still holds the internal *verbs.LockedMemoryError", err)
	}
}

// Every wrapper rnet puts around a reject keeps it reachable as the
// exported type, and keeps its text.
func TestExportRejectThroughFallback(t *testing.T) {
	reject := &cm.RejectError{Addr: "10.0.0.2:7471", Status: cm.RejectInvalidServiceID}
	tcpErr := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for name, internal := range map[string]error{
		"fallback":   &net.OpError{Op: "dial", Net: "tcp", Err: fallbackError{tcp: tcpErr, rdma: dialError(t.Context(), nil, nil, reject)}},
		"remembered": fallbackError{tcp: tcpErr, rdma: &rememberedRefusal{reason: FallbackRefused, err: reject}},
		"explained":  explainReject(&cm.RejectError{Addr: "10.0.0.2:7471", Status: cm.RejectConsumer, PrivateData: rejectReason{rejectBusy}.encode()}),
	} {
		err := exportError(internal)
		var re *RejectError
		if !errors.As(err, &re) || re.Addr != "10.0.0.2:7471" || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: %v: want a *RejectError for 10.0.0.2:7471 matching ECONNREFUSED", name, err)
		}
		if err.Error() != internal.Error() {
			t.Errorf("%s: exported text %q differs from %q", name, err, internal)
		}
	}
}
