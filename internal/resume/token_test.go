package resume

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

func TestNewTokenIsRandom(t *testing.T) {
	seen := map[Token]bool{}
	for range 1000 {
		tok, err := NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if seen[tok] {
			t.Fatalf("NewToken repeated %s", tok)
		}
		seen[tok] = true
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

// printedForms are the ways fmt can spell tok's bytes: hex, decimal and
// octal lists, and the raw bytes.
func printedForms(tok Token) []string {
	var dec, oct []string
	for _, b := range tok[:6] {
		dec = append(dec, strconv.Itoa(int(b)))
		oct = append(oct, strconv.FormatInt(int64(b), 8))
	}
	h := hex.EncodeToString(tok[:])
	return []string{h[:8], h[8:16], h[16:24], strings.Join(dec, " "), strings.Join(dec, ", "),
		strings.Join(oct, " "), string(tok[:6])}
}

// printVerbs are every verb and flag a log line might use.
var printVerbs = []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "% x", "%#x", "%d", "%o", "%c", "%U", "%08b"}

// checkNotPrinted fails if out shows tok's bytes in any form.
func checkNotPrinted(t *testing.T, what string, out string, tok Token) {
	t.Helper()
	low := strings.ToLower(out)
	for _, form := range printedForms(tok) {
		if strings.Contains(low, strings.ToLower(form)) {
			t.Errorf("%s prints the token (%q): %s", what, form, out)
			return
		}
	}
}

// A token printed any way shows a fingerprint, never its bytes, and so
// does anything that holds one: an Attempt, and the table's entries.
func TestTokenNeverPrinted(t *testing.T) {
	tok := Token{0xde, 0xad, 0xbe, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xed, 0xfa, 0xce}
	for _, verb := range printVerbs {
		out := fmt.Sprintf(verb, tok)
		checkNotPrinted(t, verb, out, tok)
		if !strings.Contains(out, tok.String()) {
			t.Errorf("%s prints %q, not the fingerprint", verb, out)
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

	// A table that issued tok and began a resume with it: the attempt
	// holds the presented token and the new one, the entry both.
	next := Token{0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69}
	src := bytes.NewReader(append(append([]byte{}, tok[:]...), next[:]...))
	tab, err := NewTable[*conn](TableConfig{MaxEntries: 1, Rand: src})
	if err != nil {
		t.Fatal(err)
	}
	a := &conn{"a"}
	if _, _, err := tab.Issue(a); err != nil {
		t.Fatal(err)
	}
	at, err := tab.Begin(tok)
	if err != nil {
		t.Fatal(err)
	}
	if !at.Token.Equal(next) {
		t.Fatalf("the table drew %s, not the test's token", at.Token)
	}
	e := tab.byValue[a]
	for _, verb := range printVerbs {
		for _, v := range []struct {
			what string
			val  any
		}{{"Attempt", at}, {"*Attempt", &at}, {"entry", *e}, {"*entry", e}} {
			out := fmt.Sprintf(verb, v.val)
			checkNotPrinted(t, v.what+" "+verb, out, tok)
			checkNotPrinted(t, v.what+" "+verb, out, next)
		}
	}
}
