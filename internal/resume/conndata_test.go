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
		name string
		req  Request
		ext  string // the bytes after the struct
	}{
		{"offer", Request{Kind: Offer, Version: 1}, "01 000000000000000000000000000000"},
		{"resume", Request{Kind: Resume, Token: testToken}, "101112131415161718191a1b1c1d1e1f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := AppendRequest(cd, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			want := append(append([]byte{}, cd...), unhex(t, tc.ext)...)
			want[1] |= 1 << 5
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
	plain, err := AppendRequest(cd, Request{Kind: Plain})
	if err != nil || !bytes.Equal(plain, cd) {
		t.Fatalf("a plain request: %x, %v", plain, err)
	}
}

// A request without the flag is plain whatever follows: the 16 bytes the
// connection manager pads a C dialer's request with are not read.
func TestParseRequestPlain(t *testing.T) {
	b := append(testConnData(), bytes.Repeat([]byte{0xee}, 16)...)
	r, err := ParseRequest(b)
	if err != nil || r.Kind != Plain {
		t.Fatalf("%+v, %v", r, err)
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

func TestAppendRequestRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		cd   []byte
		req  Request
	}{
		{"short conn data", testConnData()[:20], Request{Kind: Offer, Version: 1}},
		{"offer of version 0", testConnData(), Request{Kind: Offer}},
		{"resume with an invalid token", testConnData(), Request{Kind: Resume, Token: Token{0: 1}}},
		{"unknown kind", testConnData(), Request{Kind: 9}},
	} {
		if b, err := AppendRequest(tc.cd, tc.req); err == nil {
			t.Errorf("%s: encoded %x", tc.name, b)
		}
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
	b, err := AppendReply(cd, testReply())
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
	b, err := AppendReply(testConnData(), r)
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
	r.Addrs = append(r.Addrs, r.Addrs[0])
	if _, err := AppendReply(testConnData(), r); !errors.Is(err, ErrMalformed) {
		t.Fatalf("%d addresses: %v", len(r.Addrs), err)
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
	good, err := AppendReply(testConnData(), testReply())
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
		{"invalid token", edit(func(b []byte) []byte { copy(b[h+4:], make([]byte, 16)); return b }), ErrMalformed},
		{"one address cut short", good[:len(good)-1], ErrShort},
		{"3 addresses, 2 sent", edit(func(b []byte) []byte { b[h+1] = 3; return b }), ErrShort},
		{"1 address, 2 sent", edit(func(b []byte) []byte { b[h+1] = 1; return b }), ErrMalformed},
		{"a byte after the last address", edit(func(b []byte) []byte { return append(b, 0, 0, 1) }), ErrMalformed},
		{"unspecified v4", setAddr(0, "::ffff:0.0.0.0", 7471), ErrMalformed},
		{"unspecified v6", setAddr(1, "::", 7471), ErrMalformed},
		{"multicast", setAddr(0, "::ffff:224.0.0.1", 7471), ErrMalformed},
		{"v6 link-local", setAddr(1, "fe80::1", 7471), ErrMalformed},
		{"port 0", setAddr(1, "fd00::2", 0), ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok, err := ParseReply(tc.b)
			if !errors.Is(err, tc.want) || !errors.Is(err, ring.ErrProtocol) || ok {
				t.Fatalf("%+v, %v, %v; want %v", r, ok, err, tc.want)
			}
		})
	}
}

func TestAppendReplyRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Reply)
	}{
		{"version 0", func(r *Reply) { r.Version = 0 }},
		{"version 2", func(r *Reply) { r.Version = 2 }},
		{"lifetime under 1s", func(r *Reply) { r.Lifetime = 999 * time.Millisecond }},
		{"lifetime past the field", func(r *Reply) { r.Lifetime = MaxLifetime + time.Second }},
		{"invalid token", func(r *Reply) { r.Token = Token{} }},
		{"zone", func(r *Reply) { r.Addrs[1] = netip.MustParseAddrPort("[fe80::1%eth0]:1") }},
		{"v4-mapped", func(r *Reply) { r.Addrs[0] = netip.MustParseAddrPort("[::ffff:10.0.0.1]:1") }},
		{"no address", func(r *Reply) { r.Addrs[0] = netip.AddrPort{} }},
		{"port 0", func(r *Reply) { r.Addrs[0] = netip.MustParseAddrPort("10.0.0.1:0") }},
	} {
		r := testReply()
		tc.edit(&r)
		if b, err := AppendReply(testConnData(), r); !errors.Is(err, ring.ErrProtocol) {
			t.Errorf("%s: encoded %x, %v", tc.name, b, err)
		}
	}
	if _, err := AppendReply(testConnData()[:39], testReply()); err == nil {
		t.Error("short conn data encoded")
	}
	// A fraction of a second is dropped: the dialer never counts on more
	// time than the listener gives.
	r := testReply()
	r.Lifetime = 2500 * time.Millisecond
	b, err := AppendReply(testConnData(), r)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := ParseReply(b); got.Lifetime != 2*time.Second {
		t.Fatalf("lifetime 2.5s reads back as %v", got.Lifetime)
	}
}
