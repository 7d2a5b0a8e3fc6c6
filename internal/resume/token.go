package resume

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// TokenSize is the size of a resume token in bytes: 128 bits, all random.
const TokenSize = 16

// Token is the secret a listener gives a dialer in its reply, and that the
// dialer presents in the connection request of a resume. Whoever holds it
// can take the connection over, so it is made with crypto/rand, compared in
// constant time, kept by a Table only as its SHA-256, and never printed:
// every fmt verb shows a fingerprint.
type Token [TokenSize]byte

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

// Format prints the fingerprint for every verb and flag (%x and %d
// included), so that no format string prints the secret.
func (t Token) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		io.WriteString(f, t.GoString())
		return
	}
	io.WriteString(f, t.String())
}

// tokenDigest is a token's SHA-256: what a Table files and compares it by,
// so that the table never holds the secret itself, and a map lookup, whose
// time depends on the bytes it compares, learns an attacker nothing about
// the token.
type tokenDigest [sha256.Size]byte

func (t Token) digest() tokenDigest { return sha256.Sum256(t[:]) }

// NewToken draws a token from crypto/rand.
func NewToken() (Token, error) { return newToken(rand.Reader) }

// newToken draws a token from r.
func newToken(r io.Reader) (Token, error) {
	var t Token
	if _, err := io.ReadFull(r, t[:]); err != nil {
		return Token{}, errors.Join(errors.New("resume: reading random bytes for a token"), err)
	}
	return t, nil
}
