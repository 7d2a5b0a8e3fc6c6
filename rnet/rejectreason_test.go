package rnet

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"unicode"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/verbs"
)

func TestRejectReasonRoundTrip(t *testing.T) {
	for _, r := range []rejectReason{
		{code: rejectBusy},
		{code: rejectBadRequest},
		{code: rejectLockedMemory, errno: syscall.ENOMEM, limit: 64 << 10, needed: 264 << 10},
		{code: rejectResources, errno: syscall.EMFILE},
	} {
		b := r.encode()
		if len(b) != rejectReasonSize || len(b) > 56 {
			t.Fatalf("%v encodes to %d bytes, want %d (within the 56 every transport carries)", r, len(b), rejectReasonSize)
		}
		// InfiniBand and RoCE pad a REJ's private data with zeros to 148 bytes.
		for _, data := range [][]byte{b, append(b, make([]byte, 148-len(b))...)} {
			got, ok := decodeRejectReason(data)
			if !ok || got != r {
				t.Errorf("decode(encode(%+v)) = %+v, %v", r, got, ok)
			}
		}
	}
}

func TestRejectReasonFormat(t *testing.T) {
	b := rejectReason{code: rejectLockedMemory, errno: syscall.ENOMEM, limit: 0x0102030405060708, needed: 0x1112131415161718}.encode()
	want := []byte{'r', 'n', 'e', 't', 1, 3, 0, byte(syscall.ENOMEM),
		1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18}
	if !bytes.Equal(b, want) {
		t.Errorf("encoded\n% x\nwant\n% x", b, want)
	}
}

// What is not a reason in this format decodes to none, and a later version
// that appends fields still gives its version-1 fields.
func TestRejectReasonForeignData(t *testing.T) {
	good := rejectReason{code: rejectBusy}.encode()
	for name, data := range map[string][]byte{
		"None":               nil,
		"CListenerOnIB":      make([]byte, 148), // rsocket rejects with no data; the CM pads it
		"Truncated":          good[:rejectReasonSize-1],
		"OtherMagic":         append([]byte("RNET"), good[4:]...),
		"VersionZero":        append(append([]byte{}, good[:4]...), append([]byte{0}, good[5:]...)...),
		"TextFromAnotherApp": []byte("bad version, go away........."),
	} {
		if r, ok := decodeRejectReason(data); ok {
			t.Errorf("%s: decoded %+v from % x", name, r, data)
		}
	}
	later := append(append([]byte{}, good...), 0xAA, 0xBB)
	later[4] = 7
	if r, ok := decodeRejectReason(later); !ok || r.code != rejectBusy {
		t.Errorf("version 7 with appended fields: %+v, %v; want its version-1 fields", r, ok)
	}
}

func TestRejectReasonOf(t *testing.T) {
	lm := &verbs.LockedMemoryError{Soft: 64 << 10, Hard: 64 << 10, Pinned: 0, Region: 132 << 10, Needed: 264 << 10}
	for _, tc := range []struct {
		err  error
		want rejectReason
	}{
		{&verbs.Error{Op: "ibv_reg_mr", Device: "rxe1", Errno: syscall.ENOMEM, Err: lm},
			rejectReason{code: rejectLockedMemory, errno: syscall.ENOMEM, limit: 64 << 10, needed: 264 << 10}},
		{errBacklogFull, rejectReason{code: rejectBusy}},
		{&ring.ProtocolError{Check: ring.ErrVersion}, rejectReason{code: rejectBadRequest}},
		{&verbs.Error{Op: "ibv_create_cq", Device: "rxe1", Errno: syscall.ENOMEM}, rejectReason{code: rejectResources, errno: syscall.ENOMEM}},
		{fmt.Errorf("wrapped: %w", syscall.Errno(70000)), rejectReason{code: rejectResources}}, // no errno that does not fit 16 bits
	} {
		if got := rejectReasonOf(tc.err); got != tc.want {
			t.Errorf("rejectReasonOf(%v) = %+v, want %+v", tc.err, got, tc.want)
		}
	}
}

func TestExplainReject(t *testing.T) {
	r := rejectReason{code: rejectLockedMemory, errno: syscall.ENOMEM, limit: 64 << 10, needed: 264 << 10}
	raw := &cm.RejectError{Addr: "10.77.0.2:7471", Status: cm.RejectConsumer, PrivateData: append(r.encode(), make([]byte, 124)...)}
	err := dialError(t.Context(), nil, nil, explainReject(raw))
	for _, want := range []string{"rdma_connect 10.77.0.2:7471: rejected by the peer: the listener could not register memory",
		"locked-memory limit", "RLIMIT_MEMLOCK is 64 KiB there", "a connection pins 264 KiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	var re *RejectError
	if !errors.As(err, &re) || re != raw || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("%v: want it to unwrap to the *RejectError and match ECONNREFUSED", err)
	}
	if errors.Is(err, ErrLockedMemory) {
		t.Errorf("%v matches ErrLockedMemory, which is for this process's own limit", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "dial" {
		t.Errorf("%v: not a dial *net.OpError", err)
	}
	// A reject without a reason, as from a C listener, stays as it was.
	plain := &cm.RejectError{Addr: "10.77.0.2:7471", Status: cm.RejectConsumer, PrivateData: make([]byte, 148)}
	if got := explainReject(plain); got != error(plain) {
		t.Errorf("explainReject(plain reject) = %v", got)
	}
	other := errors.New("not a reject")
	if got := explainReject(other); got != other {
		t.Errorf("explainReject(other) = %v", got)
	}
}

// FuzzDecodeRejectReason: whatever the peer sends, decoding neither panics
// nor lets the peer's bytes into the text, and what decodes re-encodes to
// the same version-1 fields.
func FuzzDecodeRejectReason(f *testing.F) {
	f.Add(rejectReason{code: rejectLockedMemory, errno: syscall.ENOMEM, limit: 64 << 10, needed: 264 << 10}.encode())
	f.Add(rejectReason{code: rejectBusy}.encode())
	f.Add(make([]byte, 148))
	f.Add([]byte("rnet\x01\xff\xff\xff"))
	f.Add([]byte("rnet\x02\x09\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, ok := decodeRejectReason(data)
		if !ok {
			if r != (rejectReason{}) {
				t.Fatalf("undecodable data gave %+v", r)
			}
			return
		}
		if again, ok := decodeRejectReason(r.encode()); !ok || again != r {
			t.Fatalf("%+v re-decodes to %+v, %v", r, again, ok)
		}
		s := r.String()
		if s == "" || len(s) > 300 {
			t.Fatalf("text of %+v is %d bytes", r, len(s))
		}
		for _, c := range s {
			if c > unicode.MaxASCII || !unicode.IsPrint(c) {
				t.Fatalf("text of %+v holds %q", r, c)
			}
		}
		raw := &cm.RejectError{Addr: "10.77.0.2:7471", Status: cm.RejectConsumer, PrivateData: data}
		if !errors.Is(explainReject(raw), syscall.ECONNREFUSED) {
			t.Fatal("explained reject does not match ECONNREFUSED")
		}
	})
}
