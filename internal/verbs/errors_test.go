package verbs

import (
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/rnet-dev/rnet/internal/wr"
)

func TestErrorFormatAndMatching(t *testing.T) {
	err := error(&Error{Op: "rdma_resolve_route", Addr: "10.77.0.2:7471", Errno: syscall.ETIMEDOUT})
	if got, want := err.Error(), "rdma_resolve_route 10.77.0.2:7471: connection timed out"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Error("errors.Is(err, ETIMEDOUT) = false")
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Error("not a net.Error timeout")
	}

	nd := error(&Error{Op: "ibv_get_device_list", Errno: syscall.ENOSYS, Err: ErrNoDevice})
	if !errors.Is(nd, ErrNoDevice) || !errors.Is(nd, syscall.ENOSYS) {
		t.Errorf("%v: want ErrNoDevice and ENOSYS", nd)
	}
	if !strings.Contains(nd.Error(), "no RDMA device") {
		t.Errorf("%q does not say there is no device", nd)
	}

	dl := error(&Error{Op: "ibv_get_cq_event", Device: "rxe0", Err: os.ErrDeadlineExceeded})
	if !errors.Is(dl, os.ErrDeadlineExceeded) || !dl.(*Error).Timeout() {
		t.Errorf("%v: deadline not recognisable", dl)
	}
	cl := error(&Error{Op: "ibv_poll_cq", Device: "rxe0", Err: net.ErrClosed})
	if !errors.Is(cl, net.ErrClosed) {
		t.Errorf("%v: not net.ErrClosed", cl)
	}
}

func TestNotSupportedWrapsErrUnsupported(t *testing.T) {
	if !errors.Is(ErrNotSupported, errors.ErrUnsupported) {
		t.Fatal("ErrNotSupported does not wrap errors.ErrUnsupported")
	}
	if !strings.HasPrefix(ErrNotSupported.Error(), "rdma: not supported ") {
		t.Fatalf("unclear message %q", ErrNotSupported)
	}
}

func TestStatusAndOpcodeNames(t *testing.T) {
	if got := wr.WCRetryExcErr.Name(); got != "IBV_WC_RETRY_EXC_ERR" {
		t.Errorf("Name = %q", got)
	}
	c := wr.Completion{ID: 7, Status: wr.WCRetryExcErr, Opcode: wr.WCRDMAWrite, VendorErr: 0x81}
	err := CompletionErr(&c, 0x11)
	for _, want := range []string{"IBV_WC_RETRY_EXC_ERR", "IBV_WC_RDMA_WRITE", "0x11", "transport retry counter exceeded"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if CompletionErr(&wr.Completion{}, 1) != nil {
		t.Error("success completion gave an error")
	}
	if !wr.WCRecvRDMAWithImm.IsRecv() || wr.WCRDMAWrite.IsRecv() {
		t.Error("IsRecv wrong")
	}
	if a := AccessLocalWrite | AccessRemoteWrite; a.String() != "LOCAL_WRITE|REMOTE_WRITE" {
		t.Errorf("Access.String = %q", a)
	}
}
