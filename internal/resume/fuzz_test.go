package resume

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// checkFuzzErr fails unless err is a *ProtocolError that matches
// ring.ErrProtocol: whatever a peer sends, it gets a typed error, never a
// panic or an untyped one.
func checkFuzzErr(t *testing.T, err error) {
	t.Helper()
	var pe *ProtocolError
	if !errors.As(err, &pe) || !errors.Is(err, ring.ErrProtocol) || pe.Detail == "" {
		t.Fatalf("untyped error %v", err)
	}
}

func FuzzParseRequest(f *testing.F) {
	cd := testConnData()
	for _, r := range []Request{{Kind: Plain}, {Kind: Offer, Version: 1}, {Kind: Offer, Version: 200},
		{Kind: Resume, Token: testToken}, {Kind: Resume, Token: Token{0: 1}}, {Kind: Resume}} {
		b, err := EncodeRequest(cd, r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(append(b, make([]byte, 4)...))
	}
	f.Add(cd[:39])
	flagOnly := append([]byte{}, cd...)
	flagOnly[1] |= ConnDataFlag
	f.Add(flagOnly)
	f.Add(append(flagOnly, make([]byte, 16)...))
	resumeOnly := append([]byte{}, cd...)
	resumeOnly[1] |= ResumeFlag
	f.Add(append(resumeOnly, testToken[:]...))
	offerReserved := append(append([]byte{}, flagOnly...), 2)
	f.Add(append(offerReserved, bytes.Repeat([]byte{0xa5}, 15)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequest(b)
		if err != nil {
			checkFuzzErr(t, err)
			return
		}
		if r.Kind == Plain {
			if b[1]&ConnDataFlag != 0 {
				t.Fatalf("flagged request read as plain: %x", b)
			}
			return
		}
		if (r.Kind == Resume) != (b[1]&ResumeFlag != 0) {
			t.Fatalf("read as %+v with flags %#x", r, b[1])
		}
		// What parses encodes back to the same bytes, padding and an
		// offer's reserved bytes aside.
		enc, err := EncodeRequest(b[:ring.ConnDataSize:ring.ConnDataSize], r)
		if err != nil {
			t.Fatalf("%+v parsed but does not encode: %v", r, err)
		}
		want := append([]byte{}, b[:RequestPrivateData]...)
		if r.Kind == Offer {
			clear(want[ring.ConnDataSize+1:])
		}
		if !bytes.Equal(enc, want) {
			t.Fatalf("round trip:\n got %x\nwant %x", enc, want)
		}
	})
}

func FuzzParseReply(f *testing.F) {
	cd := testConnData()
	full := testReply()
	full.Addrs = nil
	for i := range MaxAddrs {
		full.Addrs = append(full.Addrs, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), 7471))
	}
	for _, r := range []Reply{testReply(), {Version: 1, Lifetime: time.Second, Token: testToken}, full} {
		b, err := EncodeReply(cd, r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(append(b, make([]byte, 196-len(b))...))
		f.Add(b[:len(b)-1])
	}
	f.Add(append(append([]byte{}, cd...), make([]byte, 156)...))
	// Addresses a reply must not carry: loopback, IPv4-compatible.
	for _, ip := range []string{"::ffff:127.0.0.1", "::1", "::10.0.0.2"} {
		b, err := EncodeReply(cd, testReply())
		if err != nil {
			f.Fatal(err)
		}
		a := netip.MustParseAddr(ip).As16()
		copy(b[ring.ConnDataSize+ReplyHeaderSize:], a[:])
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, ok, err := ParseReply(b)
		if err != nil {
			checkFuzzErr(t, err)
			return
		}
		if !ok {
			if b[1]&ConnDataFlag != 0 || !reflect.DeepEqual(r, Reply{}) {
				t.Fatalf("flagged reply read as none, or none with fields: %+v", r)
			}
			return
		}
		if len(r.Addrs) > MaxAddrs || r.Lifetime < time.Second {
			t.Fatalf("accepted out of range: %+v", r)
		}
		// Every address read is one a dialer may use: EncodeReply, which
		// refuses any other, takes it back, and writes the same bytes,
		// the TCP flag too.
		enc, err := EncodeReply(b[:ring.ConnDataSize:ring.ConnDataSize], r)
		if err != nil {
			t.Fatalf("%+v parsed but does not encode: %v", r, err)
		}
		want := append([]byte{}, b[:len(enc)]...)
		if !bytes.Equal(enc, want) {
			t.Fatalf("round trip:\n got %x\nwant %x", enc, want)
		}
	})
}

func FuzzParseExchange(f *testing.F) {
	for _, e := range []Exchange{{}, {Received: 1 << 40, EOF: true}, {Received: ^uint64(0)}} {
		b := e.Encode()
		f.Add(b[:], uint64(0), uint64(1<<41), false)
	}
	f.Add([]byte("rnRX"), uint64(5), uint64(5), true)
	f.Add(bytes.Repeat([]byte{0xff}, ExchangeSize), uint64(0), uint64(0), false)
	f.Fuzz(func(t *testing.T, b []byte, released, sent uint64, shutDown bool) {
		e, err := ParseExchange(b)
		if err != nil {
			checkFuzzErr(t, err)
			return
		}
		if enc := e.Encode(); !bytes.Equal(enc[:], b) {
			t.Fatalf("round trip:\n got %x\nwant %x", enc, b)
		}
		if released > sent {
			released, sent = sent, released
		}
		h := Held{Released: released, Sent: sent, ShutDown: shutDown}
		rs, err := h.Resend(e)
		if err != nil {
			if !errors.Is(err, ErrCountOutOfRange) {
				t.Fatalf("%+v, %+v: %v", h, e, err)
			}
			return
		}
		// Accepted: resending starts inside what the sender holds, and
		// the stream's end is sent again exactly when the peer lacks it.
		if rs.From < h.Released || rs.From > h.Sent || rs.From != e.Received {
			t.Fatalf("%+v, %+v: resend from %d", h, e, rs.From)
		}
		if rs.Shutdown != (h.ShutDown && !e.EOF) || (e.EOF && (!h.ShutDown || e.Received != h.Sent)) {
			t.Fatalf("%+v, %+v: %+v", h, e, rs)
		}
	})
}
