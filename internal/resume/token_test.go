package resume

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestNewTokenIsRandomAndValid(t *testing.T) {
	seen := map[Token]bool{}
	for range 1000 {
		tok, err := NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if !tok.Valid() {
			t.Fatalf("NewToken gave an invalid token %x", tok[:])
		}
		if seen[tok] {
			t.Fatalf("NewToken repeated %x", tok[:])
		}
		seen[tok] = true
	}
}

func TestTokenValid(t *testing.T) {
	for _, tc := range []struct {
		tok  Token
		want bool
	}{
		{Token{}, false},
		{Token{0: 1}, false},    // reads as an offer of version 1
		{Token{0: 0xff}, false}, // an offer of version 255
		{Token{15: 1}, true},
		{Token{1: 1}, true},
		{Token{0: 0, 7: 0x80}, true},
	} {
		if got := tc.tok.Valid(); got != tc.want {
			t.Errorf("%x: Valid = %v, want %v", tc.tok[:], got, tc.want)
		}
	}
}

func TestTokenEqual(t *testing.T) {
	a := Token{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	b := a
	if !a.Equal(b) {
		t.Fatal("a token is not equal to its copy")
	}
	for i := range TokenSize {
		c := a
		c[i] ^= 1
		if a.Equal(c) {
			t.Fatalf("tokens differing in byte %d are equal", i)
		}
	}
}

// A token printed any way shows a fingerprint, never its bytes.
func TestTokenNeverPrinted(t *testing.T) {
	tok := Token{0xde, 0xad, 0xbe, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xed, 0xfa, 0xce}
	secret := hex.EncodeToString(tok[:])
	for _, verb := range []string{"%v", "%s", "%x", "%X", "%#v", "%+v", "%q"} {
		out := fmt.Sprintf(verb, tok)
		if strings.Contains(strings.ToLower(out), secret[:8]) || strings.Contains(strings.ToLower(out), secret[8:16]) {
			t.Errorf("%s prints the token: %s", verb, out)
		}
	}
	if !strings.HasPrefix(tok.String(), "token#") || len(tok.String()) != len("token#")+8 {
		t.Errorf("String = %q", tok.String())
	}
	other := tok
	other[15] ^= 1
	if tok.String() == other.String() {
		t.Error("two tokens print alike")
	}
}

// A random source that yields an invalid token is drawn from again.
func TestNewTokenDrawsAgainWhenInvalid(t *testing.T) {
	valid := bytes.Repeat([]byte{7}, TokenSize)
	src := io.MultiReader(bytes.NewReader(make([]byte, TokenSize)), bytes.NewReader(valid))
	tok, err := newToken(src)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tok[:], valid) {
		t.Fatalf("got %x, want the second draw", tok[:])
	}
	if _, err := newToken(bytes.NewReader(make([]byte, 10*TokenSize))); !errors.Is(err, errNoRandom) {
		t.Fatalf("a source of zeros: %v", err)
	}
	if _, err := newToken(bytes.NewReader(make([]byte, 3))); err == nil {
		t.Fatal("a source that runs dry gave a token")
	}
}
