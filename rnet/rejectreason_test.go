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
	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/verbs"
)

func TestRejectReasonRoundTrip(t *testing.T) {
	for _, r := range []rejectReason{{rejectBusy}, {rejectBadRequest}, {rejectLockedMemory}, {rejectResources}, {rejectPendingFull}, {rejectResumeRefused}} {
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
	b := rejectReason{rejectLockedMemory}.encode()
	want := []byte{'r', 'n', 'e', 't', 1, 3}
	if !bytes.Equal(b, want) {
		t.Errorf("encoded\n% x\nwant\n% x", b, want)
	}
}

// TestRejectTellsOnlyTheReason: a reject tells the dialer, a stranger, only
// why: none of the listener's numbers (its locked-memory limit, what a
// connection pins there, its errno) go on the wire or into the dialer's
// text, which still says what is wrong and where to look.
func TestRejectTellsOnlyTheReason(t *testing.T) {
	const soft, needed = 0x10_4000, 0x42_2000 // 1 MiB + 16 KiB, 4 MiB + 136 KiB: numbers the text would show
	lm := &verbs.LockedMemoryError{Soft: soft, Hard: soft, Pinned: 0x3000, Region: needed / 2, Needed: needed}
	for _, tc := range []struct {
		err    error
		code   rejectCode
		text   string
		secret []string // what the listener knows and the dialer must not learn
	}{
		{&verbs.Error{Op: "ibv_reg_mr", Device: "rxe1", Errno: syscall.ENOMEM, Err: lm}, rejectLockedMemory,
			"the listener is out of locked memory (its RLIMIT_MEMLOCK is too low",
			[]string{verbs.FormatBytes(soft), verbs.FormatBytes(needed), syscall.ENOMEM.Error(), "rxe1"}},
		{&verbs.Error{Op: "ibv_create_cq", Device: "rxe1", Errno: syscall.EMFILE}, rejectResources,
			"the listener could not set up the connection",
			[]string{syscall.EMFILE.Error(), "ibv_create_cq", "rxe1"}},
		{errHandshakesBusy, rejectPendingFull, "the listener is busy", []string{"MaxPendingHandshakes"}},
		{errBacklogFull, rejectBusy, "the listener is busy", []string{"ListenConfig"}},
		{errResumeRefused, rejectResumeRefused, "the listener refused to resume the connection", []string{"resume request refused"}},
	} {
		b := rejectReasonOf(tc.err).encode()
		if want := append([]byte(rejectMagic), rejectVersion, byte(tc.code)); !bytes.Equal(b, want) {
			t.Errorf("the reject for %v carries % x, want only the reason, % x", tc.err, b, want)
		}
		raw := &cm.RejectError{Addr: "10.77.0.2:7471", Status: cm.RejectConsumer, PrivateData: append(b, make([]byte, 148-len(b))...)}
		text := dialError(t.Context(), nil, nil, explainReject(raw)).Error()
		if !strings.Contains(text, "rdma_connect 10.77.0.2:7471: rejected by the peer: "+tc.text) {
			t.Errorf("the dialer's error %q lacks %q", text, tc.text)
		}
		for _, s := range tc.secret {
			if strings.Contains(text, s) {
				t.Errorf("the dialer's error %q tells it %q", text, s)
			}
		}
	}
}

// What is not a reason in this format decodes to none, and a later version
// that appends fields still gives its version-1 fields.
func TestRejectReasonForeignData(t *testing.T) {
	good := rejectReason{rejectBusy}.encode()
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
		{&verbs.Error{Op: "ibv_reg_mr", Device: "rxe1", Errno: syscall.ENOMEM, Err: lm}, rejectReason{rejectLockedMemory}},
		{errBacklogFull, rejectReason{rejectBusy}},
		{fmt.Errorf("wrapped: %w", errHandshakesBusy), rejectReason{rejectPendingFull}},
		{&ring.ProtocolError{Check: ring.ErrVersion}, rejectReason{rejectBadRequest}},
		{fmt.Errorf("wrapped: %w", errResumeRefused), rejectReason{rejectResumeRefused}},
		{&resume.ProtocolError{Check: resume.ErrVersion}, rejectReason{rejectBadRequest}},
		{&verbs.Error{Op: "ibv_create_cq", Device: "rxe1", Errno: syscall.ENOMEM}, rejectReason{rejectResources}},
	} {
		if got := rejectReasonOf(tc.err); got != tc.want {
			t.Errorf("rejectReasonOf(%v) = %+v, want %+v", tc.err, got, tc.want)
		}
	}
	for code, busy := range map[rejectCode]bool{rejectBusy: true, rejectPendingFull: true, rejectLockedMemory: false, rejectResources: false, rejectBadRequest: false, rejectResumeRefused: false, 99: false} {
		if got := (rejectReason{code}).busy(); got != busy {
			t.Errorf("code %d: busy = %v, want %v", code, got, busy)
		}
	}
}

func TestExplainReject(t *testing.T) {
	raw := &cm.RejectError{Addr: "10.77.0.2:7471", Status: cm.RejectConsumer, PrivateData: append(rejectReason{rejectLockedMemory}.encode(), make([]byte, 142)...)}
	err := exportError(dialError(t.Context(), nil, nil, explainReject(raw)))
	for _, want := range []string{"rdma_connect 10.77.0.2:7471: rejected by the peer: the listener is out of locked memory",
		"RLIMIT_MEMLOCK", "HandshakeError"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	var re *RejectError
	if !errors.As(err, &re) || re.Addr != raw.Addr || re.Status != raw.Status || !re.ByApplication() || !errors.Is(err, syscall.ECONNREFUSED) {
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
	f.Add(rejectReason{rejectLockedMemory}.encode())
	f.Add(rejectReason{rejectBusy}.encode())
	f.Add(rejectReason{rejectResumeRefused}.encode())
	f.Add([]byte("rnet\x01\x06\x00\x00"))
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
