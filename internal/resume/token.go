// Package resume holds the wire format and the listener's bookkeeping of
// rnet's resume extension to rsocket v1: the conn-data fields by which a
// dialer and a listener agree to move a connection to another path when its
// queue pair fails, the token that proves a later connection request
// continues an earlier connection, the table in which a listener keeps those
// tokens, and the exchange of received-byte counts with which the two ends
// pick the byte stream up again. docs/design.md, "Resuming a connection on
// another path", is the specification.
//
// Like internal/ring it performs no I/O and starts no goroutines; the only
// clock it reads is the one its Table is given, and the only randomness it
// draws is the tokens' (crypto/rand unless a test says otherwise). Every
// decoder treats its input as a stranger's: it checks each length and range
// and answers a *ProtocolError, never a panic.
package resume

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"io"
)

// TokenSize is the size of a resume token in bytes: 128 bits, all random.
const TokenSize = 16

// Token is the secret a listener gives a dialer in its reply, and that the
// dialer presents in the connection request of a resume. Whoever holds it
// can take the connection over, so it is made with crypto/rand, compared in
// constant time, and never printed: String and GoString show a fingerprint.
type Token [TokenSize]byte

// Valid reports whether t is a token a listener can issue: one whose bytes 1
// to 15 are not all zero. A request's extension with those bytes zero is an
// offer, not a resume (see Request), so such a token could not be presented.
func (t Token) Valid() bool {
	var zero [TokenSize - 1]byte
	return subtle.ConstantTimeCompare(t[1:], zero[:]) == 0
}

// Equal reports whether t and u are the same token, in time that does not
// depend on where they differ.
func (t Token) Equal(u Token) bool {
	return subtle.ConstantTimeCompare(t[:], u[:]) == 1
}

// String is a fingerprint of the token (the first 4 bytes of its SHA-256),
// enough to tell tokens apart in a log and useless for presenting one.
func (t Token) String() string {
	d := t.digest()
	return "token#" + hex.EncodeToString(d[:4])
}

// GoString keeps %#v from printing the secret.
func (t Token) GoString() string { return "resume." + t.String() }

// digest is what a Table files the token under, so that a map lookup, whose
// time depends on the bytes it compares, learns an attacker nothing about
// the token itself.
func (t Token) digest() [sha256.Size]byte { return sha256.Sum256(t[:]) }

// NewToken draws a token from crypto/rand.
func NewToken() (Token, error) { return newToken(rand.Reader) }

// errNoRandom: the random source gave the same invalid token again and
// again, which crypto/rand never does.
var errNoRandom = errors.New("resume: the random source gives no valid token")

// newToken draws a valid token from r, drawing again (a few times at most)
// in the 2^-120 case of one that is not valid.
func newToken(r io.Reader) (Token, error) {
	for range 4 {
		var t Token
		if _, err := io.ReadFull(r, t[:]); err != nil {
			return Token{}, errors.Join(errors.New("resume: reading random bytes for a token"), err)
		}
		if t.Valid() {
			return t, nil
		}
	}
	return Token{}, errNoRandom
}
