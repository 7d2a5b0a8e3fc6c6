package resume

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
)

func TestExchangeGolden(t *testing.T) {
	for _, tc := range []struct {
		e    Exchange
		wire string
	}{
		{Exchange{}, "726e5258 01 00 0000 0000000000000000"},
		{Exchange{Received: 0x0102030405060708, EOF: true}, "726e5258 01 01 0000 0102030405060708"},
		{Exchange{Received: math.MaxUint64}, "726e5258 01 00 0000 ffffffffffffffff"},
	} {
		b := tc.e.Encode()
		if want := unhex(t, tc.wire); !bytes.Equal(b[:], want) {
			t.Errorf("%+v encodes as %x, want %x", tc.e, b, want)
		}
		got, err := ParseExchange(b[:])
		if err != nil || got != tc.e {
			t.Errorf("%x parses as %+v, %v", b, got, err)
		}
	}
}

func TestParseExchangeRefuses(t *testing.T) {
	good := Exchange{Received: 5}.Encode()
	edit := func(i int, v byte) []byte {
		b := good
		b[i] = v
		return b[:]
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"15 bytes", good[:15], ErrShort},
		{"17 bytes", append(good[:], 0), ErrShort},
		{"stream bytes", bytes.Repeat([]byte{'a'}, 16), ErrMalformed},
		{"version 2", edit(4, 2), ErrVersion},
		{"unknown flag", edit(5, 2), ErrMalformed},
		{"reserved byte 6", edit(6, 1), ErrMalformed},
		{"reserved byte 7", edit(7, 0x80), ErrMalformed},
	} {
		if _, err := ParseExchange(tc.b); !errors.Is(err, tc.want) || !errors.Is(err, ring.ErrProtocol) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestResend(t *testing.T) {
	held := Held{Released: 1000, Sent: 5000}
	for _, tc := range []struct {
		name string
		held Held
		peer Exchange
		want ResendPlan
	}{
		{"all released", held, Exchange{Received: 1000}, ResendPlan{From: 1000}},
		{"in between", held, Exchange{Received: 3217}, ResendPlan{From: 3217}},
		{"all received", held, Exchange{Received: 5000}, ResendPlan{From: 5000}},
		{"nothing sent yet", Held{}, Exchange{}, ResendPlan{}},
		{"shut down, peer saw it", Held{Released: 10, Sent: 20, ShutDown: true}, Exchange{Received: 20, EOF: true}, ResendPlan{From: 20}},
		{"shut down, SHUTDOWN lost", Held{Released: 10, Sent: 20, ShutDown: true}, Exchange{Received: 20}, ResendPlan{From: 20, Shutdown: true}},
		{"shut down, bytes and SHUTDOWN lost", Held{Released: 10, Sent: 20, ShutDown: true}, Exchange{Received: 12}, ResendPlan{From: 12, Shutdown: true}},
	} {
		got, err := tc.held.Resend(tc.peer)
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// A count outside what the sender holds ends the connection: resending
// from it would leave a gap or a duplicate in the stream.
func TestResendCountOutOfRange(t *testing.T) {
	held := Held{Released: 1000, Sent: 5000}
	for _, tc := range []struct {
		name string
		held Held
		peer Exchange
	}{
		{"below what credits showed", held, Exchange{Received: 999}},
		{"zero after credits", held, Exchange{Received: 0}},
		{"past what was sent", held, Exchange{Received: 5001}},
		{"far past", held, Exchange{Received: math.MaxUint64}},
		{"EOF never sent", held, Exchange{Received: 5000, EOF: true}},
		{"EOF before the last byte", Held{Released: 10, Sent: 20, ShutDown: true}, Exchange{Received: 19, EOF: true}},
	} {
		got, err := tc.held.Resend(tc.peer)
		if !errors.Is(err, ErrCountOutOfRange) || !errors.Is(err, ring.ErrProtocol) {
			t.Errorf("%s: %+v, %v; want ErrCountOutOfRange", tc.name, got, err)
		}
	}
	// The sender's own broken accounting is no protocol error of the peer's.
	_, err := Held{Released: 6, Sent: 5}.Resend(Exchange{Received: 5})
	if err == nil || errors.Is(err, ring.ErrProtocol) {
		t.Fatalf("Released past Sent: %v", err)
	}
}
