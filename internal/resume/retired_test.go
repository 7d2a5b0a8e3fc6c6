package resume

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A token the table stopped taking lately is refused as unknown, with
// when and why it stopped: a dialer that came back after its connection
// ended, or with a token a later resume replaced, is told apart from one
// with a wrong token, which gets the plain error.
func TestTableSaysWhyATokenRetired(t *testing.T) {
	tab, clk := newTestTable(t, 4)
	refusal := func(tok Token) error {
		t.Helper()
		_, err := tab.Begin(tok)
		if !errors.Is(err, ErrUnknownToken) {
			t.Fatalf("Begin = %v, want ErrUnknownToken", err)
		}
		return err
	}
	why := func(tok Token, want string, ago time.Duration) {
		t.Helper()
		err := refusal(tok)
		var re *RetiredError
		if !errors.As(err, &re) || re.Why != want || re.Ago != ago {
			t.Errorf("Begin = %v, want it retired %v ago because %s", err, ago, want)
		}
	}

	a := &conn{"a"}
	t0, _, err := tab.Issue(a)
	if err != nil {
		t.Fatal(err)
	}
	first, err := tab.Begin(t0)
	if err != nil {
		t.Fatal(err)
	}
	second, err := tab.Begin(first.Token) // the dialer's next request
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	why(t0, retiredReplaced, time.Second)
	if _, err := tab.Commit(second); err != nil {
		t.Fatal(err)
	}
	why(first.Token, retiredUsed, 0)
	clk.Advance(2 * time.Second)
	tab.Forget(a)
	clk.Advance(500 * time.Millisecond)
	why(second.Token, retiredEnded, 500*time.Millisecond)

	var never Token
	never[0] = 1
	if err := refusal(never); err != ErrUnknownToken {
		t.Errorf("a token never issued: Begin = %v, want the plain ErrUnknownToken", err)
	}
	if !strings.Contains(refusalText(tab, second.Token), "its connection ended") {
		t.Errorf("the refusal's text does not say why")
	}
}

func refusalText(tab *Table[*conn], tok Token) string {
	_, err := tab.Begin(tok)
	return err.Error()
}

// The table remembers only its last retiredMemory retired tokens: an older
// one gets the plain error, and a flood of connections ending keeps its
// memory of them bounded.
func TestTableRetiredMemoryIsBounded(t *testing.T) {
	tab, _ := newTestTable(t, 1)
	var oldest Token
	for i := range retiredMemory + 1 {
		c := &conn{"c"}
		tok, _, err := tab.Issue(c)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			oldest = tok
		}
		tab.Forget(c)
	}
	if _, err := tab.Begin(oldest); err != ErrUnknownToken {
		t.Errorf("the token retired %d tokens ago: Begin = %v, want the plain ErrUnknownToken", retiredMemory+1, err)
	}
}
