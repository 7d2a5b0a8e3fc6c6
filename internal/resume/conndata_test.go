package resume

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// testConnData is what ring.Engine.LocalConnData gives: version 1, IOMAP,
// 384 credits, a port MTU code and two SGEs.
func testConnData() []byte {
	c := ring.ConnData{
		Version: ring.ConnDataVersion, Flags: ring.FlagIOMap, Credits: 384, PortMTU: 3,
		TargetSGL: ring.RemoteSGE{Addr: 0x1000, Key: 0x11, Length: 2},
		DataBuf:   ring.RemoteSGE{Addr: 0x2000, Key: 0x22, Length: 64 << 10},
	}
	b := c.Encode()
	return b[:]
}

var testToken = Token{0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The request's wire bytes, as docs/design.md specifies them.
func TestRequestGolden(t *testing.T) {
	cd := testConnData()
	for _, tc := range []struct {
		name  string
		req   Request
		flags byte   // the bits the extension sets in rs_conn_data's flags
		ext   string // the bytes after the struct
	}{
		{"offer", Request{Kind: Offer, Version: 1}, 1 << 5, "01 000000000000000000000000000000"},
		{"resume", Request{Kind: Resume, Token: testToken}, 1<<5 | 1<<4, "101112131415161718191a1b1c1d1e1f"},
		// A token is all random: one that looks like an offer is still a
		// token, told apart by the flag.
		{"resume, token like an offer", Request{Kind: Resume, Token: Token{0: 1}}, 1<<5 | 1<<4, "01 000000000000000000000000000000"},
		{"resume, zero token", Request{Kind: Resume}, 1<<5 | 1<<4, "00000000000000000000000000000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := EncodeRequest(cd, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			want := append(append([]byte{}, cd...), unhex(t, tc.ext)...)
			want[1] |= tc.flags
			if !bytes.Equal(b, want) {
				t.Fatalf("encoded\n %x\nwant\n %x", b, want)
			}
			if len(b) != 56 {
				t.Fatalf("%d bytes: an IB CM REQ leaves 56 after the CM's header", len(b))
			}
			got, err := ParseRequest(b)
			if err != nil || got != tc.req {
				t.Fatalf("ParseRequest = %+v, %v; want %+v", got, err, tc.req)
			}
			// The connection manager pads with zeros: still the same.
			if got, err := ParseRequest(append(b, 0, 0, 0)); err != nil || got != tc.req {
				t.Fatalf("padded: %+v, %v", got, err)
			}
			// The struct itself still decodes, as C rsocket reads it.
			if _, err := ring.DecodeConnData(b); err != nil {
				t.Fatal(err)
			}
		})
	}
	plain, err := EncodeRequest(cd, Request{Kind: Plain})
	if err != nil || !bytes.Equal(plain, cd) {
		t.Fatalf("a plain request: %x, %v", plain, err)
	}
}

// A request without the flag is plain whatever follows: the 16 bytes the
// connection manager pads a C dialer's request with are not read, nor is
// the resume flag without the extension's.
func TestParseRequestPlain(t *testing.T) {
	b := append(testConnData(), bytes.Repeat([]byte{0xee}, 16)...)
	r, err := ParseRequest(b)
	if err != nil || r.Kind != Plain {
		t.Fatalf("%+v, %v", r, err)
	}
	b[1] |= ResumeFlag
	if r, err := ParseRequest(b); err != nil || r.Kind != Plain {
		t.Fatalf("resume flag alone: %+v, %v", r, err)
	}
}

// An offer's 15 bytes after the version are reserved for later versions:
// a reader ignores them, so that a later dialer can fill them in without
// a flag of its own.
func TestParseRequestOfferIgnoresReserved(t *testing.T) {
	b, err := EncodeRequest(testConnData(), Request{Kind: Offer, Version: 2})
	if err != nil {
		t.Fatal(err)
	}
	copy(b[ring.ConnDataSize+1:], bytes.Repeat([]byte{0xa5}, 15))
	r, err := ParseRequest(b)
	if err != nil || r != (Request{Kind: Offer, Version: 2}) {
		t.Fatalf("%+v, %v", r, err)
	}
}

// Each encoder clears the extension's flags it does not mean, whatever the
// conn data it is given holds.
func TestEncodeSetsOnlyItsFlags(t *testing.T) {
	cd := testConnData()
	cd[1] |= ConnDataFlag | ResumeFlag
	for _, tc := range []struct {
		req  Request
		want byte
	}{
		{Request{Kind: Plain}, 0},
		{Request{Kind: Offer, Version: 1}, ConnDataFlag},
		{Request{Kind: Resume, Token: testToken}, ConnDataFlag | ResumeFlag},
	} {
		b, err := EncodeRequest(cd, tc.req)
		if err != nil {
			t.Fatal(err)
		}
		if got := b[1] & (ConnDataFlag | ResumeFlag); got != tc.want {
			t.Errorf("%+v: flags %#x, want %#x", tc.req, got, tc.want)
		}
		if got, err := ParseRequest(b); err != nil || got != tc.req {
			t.Errorf("%+v reads back as %+v, %v", tc.req, got, err)
		}
	}
	b, err := EncodeReply(cd, testReply())
	if err != nil {
		t.Fatal(err)
	}
	if got := b[1] & (ConnDataFlag | ResumeFlag); got != ConnDataFlag {
		t.Errorf("reply flags %#x", got)
	}
	// TCP sets the TCP flag (the resume flag's bit, in a reply), and a
	// reply read back says so.
	rep := testReply()
	rep.TCP = true
	b, err = EncodeReply(cd, rep)
	if err != nil {
		t.Fatal(err)
	}
	if got := b[1] & (ConnDataFlag | TCPFlag); got != ConnDataFlag|TCPFlag {
		t.Errorf("reply flags with TCP %#x", got)
	}
	if r, ok, err := ParseReply(b); err != nil || !ok || !r.TCP {
		t.Errorf("ParseReply of a reply with TCP: %+v, %t, %v", r, ok, err)
	}
}

func TestParseRequestRefuses(t *testing.T) {
	withFlag := func(ext ...byte) []byte {
		b := append(testConnData(), ext...)
		b[1] |= ConnDataFlag
		return b
	}
	offer := make([]byte, 16)
	offer[0] = 1
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"shorter than the struct", testConnData()[:39], ErrShort},
		{"flag, no extension", withFlag(), ErrShort},
		{"flag, 15 bytes", withFlag(make([]byte, 15)...), ErrShort},
		{"offer of version 0", withFlag(make([]byte, 16)...), ErrVersion},
		{"a byte after the extension", withFlag(append(offer, 0, 1)...), ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRequest(tc.b)
			if !errors.Is(err, tc.want) || !errors.Is(err, ring.ErrProtocol) {
				t.Fatalf("%v; want %v and ring.ErrProtocol", err, tc.want)
			}
			var pe *ProtocolError
			if !errors.As(err, &pe) || pe.Detail == "" {
				t.Fatalf("%v: no detail", err)
			}
		})
	}
}

// checkCallerErr fails unless err is an error that is no peer's fault: not
// a *ProtocolError, and not ring.ErrProtocol, which a listener would answer
// with a reject for a bad request.
func checkCallerErr(t *testing.T, what string, b []byte, err error) {
	t.Helper()
	var pe *ProtocolError
	if err == nil || errors.As(err, &pe) || errors.Is(err, ring.ErrProtocol) {
		t.Errorf("%s: encoded %x, %v; want a plain error", what, b, err)
	}
}

func TestEncodeRequestRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		cd   []byte
		req  Request
	}{
		{"short conn data", testConnData()[:20], Request{Kind: Offer, Version: 1}},
		{"offer of version 0", testConnData(), Request{Kind: Offer}},
		{"unknown kind", testConnData(), Request{Kind: 9}},
	} {
		b, err := EncodeRequest(tc.cd, tc.req)
		checkCallerErr(t, tc.name, b, err)
	}
}

func testReply() Reply {
	return Reply{
		Version:  1,
		Lifetime: 30 * time.Second,
		Token:    testToken,
		Addrs: []netip.AddrPort{
			netip.MustParseAddrPort("10.0.0.2:7471"),
			netip.MustParseAddrPort("[fd00::2]:7472"),
		},
	}
}

// The reply's wire bytes, as docs/design.md specifies them.
func TestReplyGolden(t *testing.T) {
	cd := testConnData()
	b, err := EncodeReply(cd, testReply())
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, cd...), unhex(t, `
		01 02 001e 101112131415161718191a1b1c1d1e1f
		00000000000000000000ffff0a000002 1d2f
		fd000000000000000000000000000002 1d30`)...)
	want[1] |= 1 << 5
	if !bytes.Equal(b, want) {
		t.Fatalf("encoded\n %x\nwant\n %x", b, want)
	}
	for _, pd := range [][]byte{b, append(b, make([]byte, 196-len(b))...)} {
		got, ok, err := ParseReply(pd)
		if err != nil || !ok || !reflect.DeepEqual(got, testReply()) {
			t.Fatalf("ParseReply(%d bytes) = %+v, %v, %v", len(pd), got, ok, err)
		}
	}
}

// The most a reply holds fits an IB CM REP's 196 bytes of private data.
func TestReplyFitsREP(t *testing.T) {
	r := testReply()
	r.Addrs = nil
	for i := range MaxAddrs {
		r.Addrs = append(r.Addrs, netip.AddrPortFrom(netip.MustParseAddr("2001:db8::1").Next().Next(), uint16(7000+i)))
	}
	r.Lifetime = MaxLifetime
	b, err := EncodeReply(testConnData(), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != MaxReplyPrivateData || len(b) > 196 {
		t.Fatalf("%d bytes, want %d, within 196", len(b), MaxReplyPrivateData)
	}
	got, ok, err := ParseReply(b)
	if err != nil || !ok || !reflect.DeepEqual(got, r) {
		t.Fatalf("%+v, %v, %v", got, ok, err)
	}
}

// A C rsocket listener's reply carries its own flags only: no resume, and
// no error.
func TestParseReplyFromCPeer(t *testing.T) {
	b := append(testConnData(), make([]byte, 156)...)
	r, ok, err := ParseReply(b)
	if ok || err != nil || !reflect.DeepEqual(r, Reply{}) {
		t.Fatalf("%+v, %v, %v", r, ok, err)
	}
}

func TestParseReplyRefuses(t *testing.T) {
	good, err := EncodeReply(testConnData(), testReply())
	if err != nil {
		t.Fatal(err)
	}
	const h = ring.ConnDataSize // where the reply's extension starts
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte{}, good...)) }
	setAddr := func(i int, ip string, port uint16) []byte {
		return edit(func(b []byte) []byte {
			a := netip.MustParseAddr(ip).As16()
			e := b[h+ReplyHeaderSize+i*AddrSize:]
			copy(e, a[:])
			e[16], e[17] = byte(port>>8), byte(port)
			return b
		})
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"shorter than the struct", good[:30], ErrShort},
		{"flag, no header", good[:h+19], ErrShort},
		{"version 0", edit(func(b []byte) []byte { b[h] = 0; return b }), ErrVersion},
		{"version 2", edit(func(b []byte) []byte { b[h] = 2; return b }), ErrVersion},
		{"8 addresses", edit(func(b []byte) []byte { b[h+1] = 8; return b }), ErrMalformed},
		{"255 addresses", edit(func(b []byte) []byte { b[h+1] = 255; return b }), ErrMalformed},
		{"lifetime 0", edit(func(b []byte) []byte { b[h+2], b[h+3] = 0, 0; return b }), ErrMalformed},
		{"one address cut short", good[:len(good)-1], ErrShort},
		{"3 addresses, 2 sent", edit(func(b []byte) []byte { b[h+1] = 3; return b }), ErrShort},
		{"1 address, 2 sent", edit(func(b []byte) []byte { b[h+1] = 1; return b }), ErrMalformed},
		{"a byte after the last address", edit(func(b []byte) []byte { return append(b, 0, 0, 1) }), ErrMalformed},
		{"unspecified v4", setAddr(0, "::ffff:0.0.0.0", 7471), ErrMalformed},
		{"unspecified v6", setAddr(1, "::", 7471), ErrMalformed},
		{"multicast", setAddr(0, "::ffff:224.0.0.1", 7471), ErrMalformed},
		{"v6 link-local", setAddr(1, "fe80::1", 7471), ErrMalformed},
		{"port 0", setAddr(1, "fd00::2", 0), ErrMalformed},
		{"v4 loopback", setAddr(0, "::ffff:127.0.0.1", 7471), ErrMalformed},
		{"v4 loopback, not .1", setAddr(0, "::ffff:127.3.2.1", 7471), ErrMalformed},
		{"v6 loopback", setAddr(1, "::1", 7471), ErrMalformed},
		{"IPv4-compatible", setAddr(1, "::10.0.0.2", 7471), ErrMalformed},
		{"IPv4-compatible, high", setAddr(1, "::255.0.0.1", 7471), ErrMalformed},
		{"v4 broadcast", setAddr(0, "::ffff:255.255.255.255", 7471), ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok, err := ParseReply(tc.b)
			if !errors.Is(err, tc.want) || !errors.Is(err, ring.ErrProtocol) || ok {
				t.Fatalf("%+v, %v, %v; want %v", r, ok, err, tc.want)
			}
		})
	}
}

func TestEncodeReplyRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Reply)
	}{
		{"version 0", func(r *Reply) { r.Version = 0 }},
		{"version 2", func(r *Reply) { r.Version = 2 }},
		{"lifetime under 1s", func(r *Reply) { r.Lifetime = 999 * time.Millisecond }},
		{"lifetime past the field", func(r *Reply) { r.Lifetime = MaxLifetime + time.Second }},
		// The reply states whole seconds: a fraction would be dropped.
		{"lifetime 2.5s", func(r *Reply) { r.Lifetime = 2500 * time.Millisecond }},
		{"8 addresses", func(r *Reply) {
			for len(r.Addrs) < 8 {
				r.Addrs = append(r.Addrs, r.Addrs[0])
			}
		}},
		{"zone", func(r *Reply) { r.Addrs[1] = netip.MustParseAddrPort("[fe80::1%eth0]:1") }},
		{"v4-mapped", func(r *Reply) { r.Addrs[0] = netip.MustParseAddrPort("[::ffff:10.0.0.1]:1") }},
		{"no address", func(r *Reply) { r.Addrs[0] = netip.AddrPort{} }},
		{"port 0", func(r *Reply) { r.Addrs[0] = netip.MustParseAddrPort("10.0.0.1:0") }},
		{"v4 loopback", func(r *Reply) { r.Addrs[0] = netip.MustParseAddrPort("127.0.0.1:7471") }},
		{"v6 loopback", func(r *Reply) { r.Addrs[1] = netip.MustParseAddrPort("[::1]:7471") }},
		{"IPv4-compatible", func(r *Reply) { r.Addrs[1] = netip.MustParseAddrPort("[::10.0.0.2]:7471") }},
	} {
		r := testReply()
		tc.edit(&r)
		b, err := EncodeReply(testConnData(), r)
		checkCallerErr(t, tc.name, b, err)
	}
	b, err := EncodeReply(testConnData()[:39], testReply())
	checkCallerErr(t, "short conn data", b, err)
}
