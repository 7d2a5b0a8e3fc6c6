package resume

import (
	"encoding/binary"
	"errors"
	"strconv"

	"github.com/rnet-dev/rnet/internal/ring"
)

// ExchangeSize is the size of the exchange message: the first message each
// side sends on a resumed queue pair, in its first write with immediate,
// before any byte of the stream.
const ExchangeSize = 16

// exchangeMagic opens every exchange message, so that a side that meets
// stream bytes where the exchange should be says so instead of reading a
// count out of them.
const exchangeMagic = "rnRX"

// exchangeEOF is the flag of an exchange message that says its sender has
// received the peer's SHUTDOWN. No other flag is defined in version 1.
const exchangeEOF = 1 << 0

// Exchange is what one side of a resumed connection tells the other: how
// much of the other's stream it has.
type Exchange struct {
	// Received counts the stream bytes this side has received from the
	// peer since the connection began, on every path, whether or not the
	// application has read them yet.
	Received uint64
	// EOF says this side has received the peer's SHUTDOWN (its CloseWrite).
	EOF bool
}

// Encode lays e out as the 16 wire bytes:
//
//	offset size
//	0      4    magic "rnRX"
//	4      1    version (1)
//	5      1    flags: bit 0 EOF; the others zero
//	6      2    zero
//	8      8    Received, big-endian
func (e Exchange) Encode() [ExchangeSize]byte {
	var b [ExchangeSize]byte
	copy(b[:], exchangeMagic)
	b[4] = Version
	if e.EOF {
		b[5] = exchangeEOF
	}
	binary.BigEndian.PutUint64(b[8:], e.Received)
	return b
}

// ParseExchange reads an exchange message, which must be exactly
// ExchangeSize bytes.
func ParseExchange(b []byte) (Exchange, error) {
	if len(b) != ExchangeSize {
		return Exchange{}, protoErr(ErrShort, "exchange message of "+strconv.Itoa(len(b))+" bytes, not "+strconv.Itoa(ExchangeSize))
	}
	if string(b[:4]) != exchangeMagic {
		return Exchange{}, protoErr(ErrMalformed, "exchange message without its magic")
	}
	if b[4] != Version {
		return Exchange{}, protoErr(ErrVersion, "exchange message of version "+strconv.Itoa(int(b[4])))
	}
	if b[5]&^exchangeEOF != 0 || b[6] != 0 || b[7] != 0 {
		return Exchange{}, protoErr(ErrMalformed, "exchange message with reserved bits set")
	}
	return Exchange{Received: binary.BigEndian.Uint64(b[8:]), EOF: b[5]&exchangeEOF != 0}, nil
}

// Held is what a sender still holds of its stream when its path fails.
type Held struct {
	// Released counts the bytes the peer's credit updates have shown
	// received: the sender has let them go, and cannot send them again.
	Released uint64
	// Sent counts the bytes posted to the peer on any path, received or
	// not. Released <= Sent.
	Sent uint64
	// ShutDown says the sender has sent SHUTDOWN after its last byte.
	ShutDown bool
}

// ResendPlan is what a sender sends again after the exchange.
type ResendPlan struct {
	// From is the first stream byte to send again; bytes from there to
	// what the application has written go out in order.
	From uint64
	// Shutdown says SHUTDOWN must follow them: the sender had sent it, and
	// the peer has not received it.
	Shutdown bool
}

// Resend checks the peer's exchange against what h holds and says what to
// send again. A count below Released (bytes the peer's own credit updates
// said it had, which the sender no longer holds) or above Sent (bytes never
// sent), or an EOF the sender never sent or sent after more bytes than the
// peer counts, is a *ProtocolError with ErrCountOutOfRange: the connection
// cannot continue without a gap or a duplicate, and ends.
func (h Held) Resend(peer Exchange) (ResendPlan, error) {
	if h.Released > h.Sent {
		// The caller's own accounting is broken: not the peer's fault.
		return ResendPlan{}, errors.New("resume: Held.Released " + strconv.FormatUint(h.Released, 10) +
			" is past Sent " + strconv.FormatUint(h.Sent, 10))
	}
	if peer.Received < h.Released || peer.Received > h.Sent {
		return ResendPlan{}, protoErr(ErrCountOutOfRange, "the peer has received "+strconv.FormatUint(peer.Received, 10)+
			" bytes; this side holds bytes "+strconv.FormatUint(h.Released, 10)+" to "+strconv.FormatUint(h.Sent, 10))
	}
	if peer.EOF && (!h.ShutDown || peer.Received != h.Sent) {
		detail := "the peer saw the end of the stream at " + strconv.FormatUint(peer.Received, 10) + " bytes; "
		if !h.ShutDown {
			detail += "this side never ended it"
		} else {
			detail += "this side ended it after " + strconv.FormatUint(h.Sent, 10)
		}
		return ResendPlan{}, protoErr(ErrCountOutOfRange, detail)
	}
	return ResendPlan{From: peer.Received, Shutdown: h.ShutDown && !peer.EOF}, nil
}

// HeldBy reads what an engine that keeps its sent bytes
// (ring.Config.RetainUntilReceived) still holds of its stream; call it
// once its failed queue pair has no send in flight (every completion
// polled, or, its device gone, the queue pair destroyed and
// ring.Engine.QueuePairDestroyed called), so that the counts are final;
// before that it fails. An engine that does not keep them gives
// ring.ErrNotRetaining.
func HeldBy(e *ring.Engine) (Held, error) {
	if !e.Config().RetainUntilReceived {
		return Held{}, ring.ErrNotRetaining
	}
	if n := e.InFlight(); n != 0 {
		return Held{}, errors.New("resume: the counts are not final: " + strconv.Itoa(n) +
			" sends still in flight on the failed queue pair")
	}
	c := e.StreamCounts()
	return Held{Released: c.Released, Sent: c.Sent, ShutDown: c.ShutDown}, nil
}
