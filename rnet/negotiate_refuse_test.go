package rnet

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/rnet-dev/rnet/internal/cm"
	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
)

// asResume turns an offer on the wire into a request that resumes the
// connection tok names.
func asResume(tok resume.Token) func([]byte) []byte {
	return func(b []byte) []byte {
		b[1] |= resume.ResumeFlag
		copy(b[ring.ConnDataSize:], tok[:])
		return b
	}
}

// TestResumeTokenIsChecked: a request that resumes a connection with a
// wrong token, a replayed one (presented by a resume that completed), or
// to a listener without Config.Resume, is refused with reason 6 before
// anything is set up for it, counted as resume_refused, and read by the
// dialer as final, not busy; the connection the token named goes on as
// before. The connection's current token is taken, and names it.
func TestResumeTokenIsChecked(t *testing.T) {
	lr := newTestResumeListener(t, 4)
	h, err := simNegotiate(resumeSettings(true), resumeSettings(true), lr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBoth(t, h)
	first := h.dialer.resume.token
	refused := func(name string, lr *resumeListener, tok resume.Token, why error) {
		t.Helper()
		_, err := simNegotiate(resumeSettings(true), resumeSettings(lr != nil), lr, asResume(tok))
		if !errors.Is(err, errResumeRefused) || !errors.Is(err, why) {
			t.Fatalf("%s: %v, want errResumeRefused for %v", name, err, why)
		}
		if r := rejectReasonOf(err); r.code != rejectResumeRefused {
			t.Errorf("%s: reject reason %d, want %d", name, r.code, rejectResumeRefused)
		}
		// Counted and logged as its own refusal, not as the listener
		// short of resources.
		if f := handshakeFailureOf(err, true); f.String() != "resume_refused" {
			t.Errorf("%s: counted as %q, want resume_refused", name, f)
		}
		// The same reject whatever the token, and the dialer does not
		// take it as busy.
		raw := &cm.RejectError{Addr: simListener.String(), Status: cm.RejectConsumer,
			PrivateData: append(rejectReasonOf(err).encode(), make([]byte, 142)...)}
		derr := explainReject(raw)
		if refusedAsBusy(derr) || !strings.Contains(derr.Error(), "refused to resume the connection") {
			t.Errorf("%s: the dialer reads %v", name, derr)
		}
		if got := dialFailureReason(exportError(derr)); got != "resume_refused" {
			t.Errorf("%s: the dialer counts the failure as %q, want resume_refused", name, got)
		}
	}
	taken := func(name string, tok resume.Token) *resume.Attempt[*resumeEntry] {
		t.Helper()
		s, err := simNegotiate(resumeSettings(true), resumeSettings(true), lr, asResume(tok))
		if !errors.Is(err, errSimResumeTaken) || s.attempt.Value != h.grant.entry {
			t.Fatalf("%s: %v; want the request taken for the connection's entry", name, err)
		}
		return s.attempt
	}
	var wrong resume.Token
	wrong[0] = 1
	refused("wrong token", lr, wrong, resume.ErrUnknownToken)
	refused("zero token", lr, resume.Token{}, resume.ErrUnknownToken)
	refused("listener without Resume", nil, first, errNoResumes)

	// A resume whose handshake fails before the RTU leaves both tokens
	// valid; one that completes retires the one it presented.
	a := taken("the connection's token", first)
	lr.table.Abort(*a)
	b := taken("the first token again after an abort", first)
	if _, err := lr.table.Commit(*b); err != nil {
		t.Fatalf("commit: %v", err)
	}
	refused("replayed token", lr, first, resume.ErrUnknownToken)
	refused("the token the aborted resume was given", lr, a.Token, resume.ErrUnknownToken)
	lr.table.Abort(*taken("the committed resume's token", b.Token))
	if n := lr.table.Len(); n != 1 {
		t.Errorf("table holds %d connections after the refusals, want 1", n)
	}
	roundTrip(t, h.dialer, h.listener, 200<<10)
}

// TestResumeTokensForgotten: a connection's token leaves the table when
// it closes and when its handshake fails, so that many connect and close
// cycles through a small table each get a token.
func TestResumeTokensForgotten(t *testing.T) {
	lr := newTestResumeListener(t, 2)
	for i := range 50 {
		h, err := simNegotiate(resumeSettings(true), resumeSettings(true), lr, nil)
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if h.dialer.resume == nil {
			t.Fatalf("cycle %d: no agreement: the table kept closed connections", i)
		}
		roundTrip(t, h.dialer, h.listener, 100)
		closeBoth(t, h)
		if n := lr.table.Len(); n != 0 {
			t.Fatalf("cycle %d: table holds %d connections after Close", i, n)
		}
	}
	// A handshake that fails after the grant: the dialer's conn data
	// says its credit window grows (bit 7), which no retaining engine
	// can count.
	growing := func(b []byte) []byte { b[1] |= ring.FlagGrowingCredits; return b }
	for i := range 5 {
		_, err := simNegotiate(resumeSettings(true), resumeSettings(true), lr, growing)
		if !errors.Is(err, ring.ErrBadConnData) || rejectReasonOf(err).code != rejectBadRequest {
			t.Fatalf("attempt %d: %v, want ring.ErrBadConnData, refused as a bad request", i, err)
		}
		if n := lr.table.Len(); n != 0 {
			t.Fatalf("attempt %d: table holds %d connections after a failed handshake", i, n)
		}
	}
}

// TestResumeBrokenExtension: a peer that sets bit 5 with a broken extension
// is refused (listener, reason 2) or fails the dial (dialer) with a protocol
// error naming the field; a reply's extension to a request without an
// offer is ignored.
func TestResumeBrokenExtension(t *testing.T) {
	lr := newTestResumeListener(t, 4)
	versionZero := func(b []byte) []byte { b[ring.ConnDataSize] = 0; return b }
	_, err := simNegotiate(resumeSettings(true), resumeSettings(true), lr, versionZero)
	if !errors.Is(err, resume.ErrVersion) || rejectReasonOf(err).code != rejectBadRequest {
		t.Errorf("offer of version 0: %v, want resume.ErrVersion refused as a bad request", err)
	}
	if lr.table.Len() != 0 {
		t.Error("a broken offer took a table entry")
	}

	pd := [ring.ConnDataSize]byte{ring.ConnDataVersion, ring.FlagIOMap}
	reply, err := resume.EncodeReply(pd[:], resume.Reply{Version: resume.Version, Lifetime: resume.DefaultLifetime})
	if err != nil {
		t.Fatal(err)
	}
	broken := append(append([]byte{}, reply...), make([]byte, simReplySeen-len(reply))...)
	broken[ring.ConnDataSize+2], broken[ring.ConnDataSize+3] = 0, 0 // lifetime 0
	if a, err := readReply(broken, true); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "lifetime") || a != nil {
		t.Errorf("reply with lifetime 0: %v, %v; want a protocol error naming the lifetime", a, err)
	}
	if a, err := readReply(broken, false); a != nil || err != nil {
		t.Errorf("reply with the extension to a request without it: %v, %v; want it ignored", a, err)
	}
}

func TestResumeTableEntries(t *testing.T) {
	l := defaultSettingsLayout()
	idle := uint64(pinnedIdle(l))
	for _, tc := range []struct {
		memlock uint64
		want    int
	}{
		{8 << 20, int((8 << 20) / idle)},
		{64 << 10, minResumeEntries},
		{0, minResumeEntries},
		{noMemlockLimit, maxResumeEntries},
		{idle * (maxResumeEntries + 1), maxResumeEntries},
	} {
		if got := resumeTableEntries(pinnable(tc.memlock, false), l); got != tc.want {
			t.Errorf("resumeTableEntries(%d) = %d, want %d", tc.memlock, got, tc.want)
		}
		// A process exempt from the limit (CAP_IPC_LOCK) pins past it: the
		// limit bounds nothing.
		if got := resumeTableEntries(pinnable(tc.memlock, true), l); got != maxResumeEntries {
			t.Errorf("exempt from a limit of %d: %d entries, want %d", tc.memlock, got, maxResumeEntries)
		}
	}
}

func TestResumeAddrs(t *testing.T) {
	local := []hostDevice{
		{"rxe0", []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("::1")}},
		{"rxe1", []netip.Addr{netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fd00::2"), netip.MustParseAddr("::ffff:10.9.0.1")}},
		{"lo_rxe", []netip.Addr{netip.MustParseAddr("::10.9.0.2"), netip.MustParseAddr("224.0.0.1")}},
	}
	for listen, want := range map[string]string{
		"[::]:7471":        "[10.0.0.2:7471 [fd00::2]:7471 10.9.0.1:7471]",
		"[::]:7471 v6only": "[[fd00::2]:7471]",
		"0.0.0.0:7471":     "[10.0.0.2:7471 10.9.0.1:7471]",
		"10.0.0.2:7471":    "[]",
		"[fd00::2]:7471":   "[]",
	} {
		addr, v6only := strings.CutSuffix(listen, " v6only")
		var got []netip.AddrPort
		for _, d := range resumeAddrs(netip.MustParseAddrPort(addr), v6only, local) {
			if d.name == "lo_rxe" || len(d.addrs) == 0 {
				t.Errorf("listener %s keeps device %s with %v", listen, d.name, d.addrs)
			}
			got = append(got, d.addrs...)
		}
		if s := fmtAddrs(got); s != want {
			t.Errorf("listener %s names %s, want %s", listen, s, want)
		}
	}
}

// TestResumeReplyAddrs: a reply names the other devices' addresses first,
// one of each in turn, then the other addresses of the device the request
// came in on, never the one dialled, at most seven; so a device with many
// addresses does not crowd the other devices out.
func TestResumeReplyAddrs(t *testing.T) {
	ap := netip.MustParseAddrPort
	devices := []replyDevice{
		{"rxe0", []netip.AddrPort{ap("10.0.0.2:1"), ap("[fd00::2]:1"), ap("[fd00::3]:1"), ap("[fd00::4]:1"), ap("[fd00::5]:1"), ap("[fd00::6]:1"), ap("[fd00::7]:1"), ap("[fd00::8]:1")}},
		{"rxe1", []netip.AddrPort{ap("10.1.0.2:1"), ap("[fd01::2]:1")}},
		{"mlx5_0", []netip.AddrPort{ap("10.2.0.2:1")}},
	}
	for _, tc := range []struct {
		dialled netip.Addr
		arrival string
		want    string
	}{
		{netip.MustParseAddr("10.0.0.2"), "rxe0", "[10.1.0.2:1 10.2.0.2:1 [fd01::2]:1 [fd00::2]:1 [fd00::3]:1 [fd00::4]:1 [fd00::5]:1]"},
		{netip.MustParseAddr("::ffff:10.1.0.2"), "rxe1", "[10.0.0.2:1 10.2.0.2:1 [fd00::2]:1 [fd00::3]:1 [fd00::4]:1 [fd00::5]:1 [fd00::6]:1]"},
		{netip.MustParseAddr("10.2.0.2"), "mlx5_0", "[10.0.0.2:1 10.1.0.2:1 [fd00::2]:1 [fd01::2]:1 [fd00::3]:1 [fd00::4]:1 [fd00::5]:1]"},
	} {
		if got := fmtAddrs(replyAddrs(devices, tc.dialled, tc.arrival)); got != tc.want {
			t.Errorf("dialled %v on %s: names %s, want %s", tc.dialled, tc.arrival, got, tc.want)
		}
	}
}

// TestResumeNamespaceAddrs: of a device's addresses, a listener keeps
// those on its own network namespace's interfaces; a RoCE GID of a netdev
// in another namespace is not one.
func TestResumeNamespaceAddrs(t *testing.T) {
	devices := []hostDevice{
		{"rxe0", []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.5.9"), netip.MustParseAddr("fd00::2")}},
		{"rxe1", []netip.Addr{netip.MustParseAddr("10.7.0.1")}},
	}
	ifaces := []netInterface{
		{index: 2, addrs: []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::2")}},
		{index: 1, addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
	}
	var got []string
	for _, d := range namespaceAddrs(devices, ifaces) {
		got = append(got, fmt.Sprint(d.name, d.addrs))
	}
	if fmt.Sprint(got) != "[rxe0[10.0.0.2 fd00::2] rxe1[]]" {
		t.Errorf("kept %v; want rxe0's 10.0.0.2 and fd00::2, nothing of rxe1", got)
	}
}

func fmtAddrs(a []netip.AddrPort) string {
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = x.String()
	}
	return "[" + strings.Join(s, " ") + "]"
}
