package resume

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// clock is a Table's injected clock: it moves only when a test says so.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type conn struct{ name string }

func newTestTable(t *testing.T, max int) (*Table[*conn], *clock) {
	t.Helper()
	c := newClock()
	tab, err := NewTable[*conn](TableConfig{MaxEntries: max, Lifetime: 10 * time.Second, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return tab, c
}

// tableSizes is what the table holds, to show that refusals store nothing.
func tableSizes(tab *Table[*conn]) (values, tokens, suspended int) {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	return len(tab.byValue), len(tab.byToken), tab.suspended.Len()
}

func TestTableResume(t *testing.T) {
	tab, clk := newTestTable(t, 4)
	a := &conn{"a"}
	tok, err := tab.Issue(a)
	if err != nil {
		t.Fatal(err)
	}
	deadline, ok := tab.Suspend(a)
	if !ok || !deadline.Equal(clk.Now().Add(10*time.Second)) {
		t.Fatalf("Suspend = %v, %v", deadline, ok)
	}
	clk.Advance(9 * time.Second)
	at, err := tab.Begin(tok)
	if err != nil {
		t.Fatal(err)
	}
	if at.Value != a || !at.Token.Valid() || at.Token.Equal(tok) || !at.Deadline.Equal(deadline) {
		t.Fatalf("attempt %+v", at)
	}
	if err := tab.Commit(at); err != nil {
		t.Fatal(err)
	}
	if v, tk, s := tableSizes(tab); v != 1 || tk != 1 || s != 0 {
		t.Fatalf("after a commit: %d connections, %d tokens, %d suspended", v, tk, s)
	}
	// Up again, the connection has no deadline: a day later its new token
	// still resumes it.
	clk.Advance(24 * time.Hour)
	at2, err := tab.Begin(at.Token)
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.Commit(at2); err != nil {
		t.Fatal(err)
	}
}

func TestTableRefusesWrongToken(t *testing.T) {
	tab, _ := newTestTable(t, 4)
	tok, err := tab.Issue(&conn{"a"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range TokenSize {
		wrong := tok
		wrong[i] ^= 0x40
		if _, err := tab.Begin(wrong); !errors.Is(err, ErrUnknownToken) {
			t.Fatalf("token with byte %d changed: %v", i, err)
		}
	}
	if _, err := tab.Begin(Token{}); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("zero token: %v", err)
	}
	// The refusals left the connection as it was.
	if v, tk, s := tableSizes(tab); v != 1 || tk != 1 || s != 0 {
		t.Fatalf("%d connections, %d tokens, %d suspended", v, tk, s)
	}
	if _, err := tab.Begin(tok); err != nil {
		t.Fatalf("the right token after wrong ones: %v", err)
	}
}

func TestTableRefusesReplayedToken(t *testing.T) {
	tab, _ := newTestTable(t, 4)
	tok, _ := tab.Issue(&conn{"a"})
	at, err := tab.Begin(tok)
	if err != nil {
		t.Fatal(err)
	}
	// While the resume's handshake runs, the token does not start another.
	if _, err := tab.Begin(tok); !errors.Is(err, ErrBusy) {
		t.Fatalf("during the handshake: %v", err)
	}
	if _, err := tab.Begin(at.Token); !errors.Is(err, ErrBusy) {
		t.Fatalf("the new token during the handshake: %v", err)
	}
	if err := tab.Commit(at); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Begin(tok); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("replayed after the resume: %v", err)
	}
	if v, tk, s := tableSizes(tab); v != 1 || tk != 1 || s != 0 {
		t.Fatalf("the used token is still filed: %d connections, %d tokens, %d suspended", v, tk, s)
	}
	// Committing the same attempt again does nothing.
	if err := tab.Commit(at); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("second commit: %v", err)
	}
}

func TestTableRefusesExpiredToken(t *testing.T) {
	tab, clk := newTestTable(t, 4)
	a := &conn{"a"}
	tok, _ := tab.Issue(a)
	// A connection whose path is up does not expire.
	clk.Advance(time.Hour)
	if _, ok := tab.Suspend(a); !ok {
		t.Fatal("Suspend: unknown")
	}
	clk.Advance(10 * time.Second)
	if _, err := tab.Begin(tok); !errors.Is(err, ErrExpired) {
		t.Fatalf("at the deadline: %v", err)
	}
	if v, tk, s := tableSizes(tab); v != 0 || tk != 0 || s != 0 {
		t.Fatalf("expired connection kept: %d connections, %d tokens, %d suspended", v, tk, s)
	}
	if _, err := tab.Begin(tok); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("after expiry: %v", err)
	}
}

// A resume must be committed within the lifetime; a handshake that comes
// late ends, and so does one whose connection ended meanwhile.
func TestTableCommitTooLate(t *testing.T) {
	tab, clk := newTestTable(t, 4)
	a, b := &conn{"a"}, &conn{"b"}
	tokA, _ := tab.Issue(a)
	tokB, _ := tab.Issue(b)
	atA, err := tab.Begin(tokA)
	if err != nil {
		t.Fatal(err)
	}
	atB, err := tab.Begin(tokB)
	if err != nil {
		t.Fatal(err)
	}
	tab.Forget(b)
	if err := tab.Commit(atB); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("commit after Forget: %v", err)
	}
	clk.Advance(10 * time.Second)
	if err := tab.Commit(atA); !errors.Is(err, ErrExpired) {
		t.Fatalf("commit after the lifetime: %v", err)
	}
	if n := tab.Len(); n != 0 {
		t.Fatalf("%d connections kept", n)
	}
}

// A failed handshake leaves both tokens valid, since the dialer may or may
// not have the new one; whichever it presents next retires the other.
func TestTableAbortKeepsBothTokens(t *testing.T) {
	for _, presentNew := range []bool{false, true} {
		tab, clk := newTestTable(t, 4)
		a := &conn{"a"}
		old, _ := tab.Issue(a)
		at, err := tab.Begin(old)
		if err != nil {
			t.Fatal(err)
		}
		tab.Abort(at)
		tab.Abort(at) // twice does nothing more
		clk.Advance(5 * time.Second)
		next, other := old, at.Token
		if presentNew {
			next, other = at.Token, old
		}
		at2, err := tab.Begin(next)
		if err != nil {
			t.Fatalf("presentNew=%v: %v", presentNew, err)
		}
		if !at2.Deadline.Equal(at.Deadline) {
			t.Fatalf("the deadline moved from %v to %v", at.Deadline, at2.Deadline)
		}
		if err := tab.Commit(at2); err != nil {
			t.Fatal(err)
		}
		for _, tok := range []Token{old, at.Token, other} {
			if _, err := tab.Begin(tok); !errors.Is(err, ErrUnknownToken) {
				t.Fatalf("presentNew=%v: a retired token: %v", presentNew, err)
			}
		}
		if _, err := tab.Begin(at2.Token); err != nil {
			t.Fatal(err)
		}
	}
}

// The lookup by digest is checked against the tokens themselves, in
// constant time, so that only the token itself names its connection.
func TestEntryHolds(t *testing.T) {
	other := testToken
	other[9] ^= 1
	e := &entry[*conn]{tokens: [2]Token{testToken, other}, ntokens: 1}
	if !e.holds(testToken) || e.holds(other) || e.holds(Token{}) {
		t.Fatal("one token held: wrong answers")
	}
	e.ntokens = 2
	if !e.holds(testToken) || !e.holds(other) {
		t.Fatal("two tokens held: wrong answers")
	}
}

func TestTableForget(t *testing.T) {
	tab, _ := newTestTable(t, 4)
	a := &conn{"a"}
	tok, _ := tab.Issue(a)
	tab.Suspend(a)
	tab.Forget(a)
	tab.Forget(a)
	if _, err := tab.Begin(tok); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("after Forget: %v", err)
	}
	if _, ok := tab.Suspend(a); ok {
		t.Fatal("Suspend of a forgotten connection")
	}
	if v, tk, s := tableSizes(tab); v != 0 || tk != 0 || s != 0 {
		t.Fatalf("%d connections, %d tokens, %d suspended", v, tk, s)
	}
	if _, err := tab.Issue(a); err != nil {
		t.Fatalf("issuing again after Forget: %v", err)
	}
	if _, err := tab.Issue(a); !errors.Is(err, errIssued) {
		t.Fatalf("second Issue: %v", err)
	}
}

// A full table takes no more connections until one ends or expires; an
// expired one makes room without anyone forgetting it.
func TestTableBounded(t *testing.T) {
	tab, clk := newTestTable(t, 3)
	conns := []*conn{{"a"}, {"b"}, {"c"}}
	for _, c := range conns {
		if _, err := tab.Issue(c); err != nil {
			t.Fatal(err)
		}
	}
	d := &conn{"d"}
	if _, err := tab.Issue(d); !errors.Is(err, ErrTableFull) {
		t.Fatalf("fourth in a table of 3: %v", err)
	}
	tab.Suspend(conns[0])
	clk.Advance(5 * time.Second)
	tab.Suspend(conns[1])
	if _, err := tab.Issue(d); !errors.Is(err, ErrTableFull) {
		t.Fatalf("nothing expired yet: %v", err)
	}
	clk.Advance(5 * time.Second) // a's deadline
	if _, err := tab.Issue(d); err != nil {
		t.Fatalf("a expired: %v", err)
	}
	if v, tk, s := tableSizes(tab); v != 3 || tk != 3 || s != 1 {
		t.Fatalf("%d connections, %d tokens, %d suspended", v, tk, s)
	}
}

// One call forgets at most sweepLimit expired connections, however many
// expired at once, and later calls forget the rest.
func TestTableSweepBounded(t *testing.T) {
	const n = 3*sweepLimit + 1
	tab, clk := newTestTable(t, n+1)
	for i := range n {
		c := &conn{}
		if _, err := tab.Issue(c); err != nil {
			t.Fatal(i, err)
		}
		tab.Suspend(c)
	}
	clk.Advance(time.Minute)
	for want := n - sweepLimit; want >= 0; want -= sweepLimit {
		tab.Begin(Token{1: 1}) // any call sweeps
		if _, _, s := tableSizes(tab); s != want {
			t.Fatalf("%d suspended after a sweep, want %d", s, want)
		}
	}
	tab.Begin(Token{1: 1})
	if v, tk, s := tableSizes(tab); v != 0 || tk != 0 || s != 0 {
		t.Fatalf("%d connections, %d tokens, %d suspended", v, tk, s)
	}
}

// A flood of resume attempts with made-up tokens stores nothing and leaves
// the real connections resumable.
func TestTableFloodOfWrongTokens(t *testing.T) {
	tab, _ := newTestTable(t, 8)
	a := &conn{"a"}
	tok, _ := tab.Issue(a)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 2000 {
				wrong, err := NewToken()
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := tab.Begin(wrong); !errors.Is(err, ErrUnknownToken) {
					t.Errorf("a made-up token: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if v, tk, s := tableSizes(tab); v != 1 || tk != 1 || s != 0 {
		t.Fatalf("%d connections, %d tokens, %d suspended", v, tk, s)
	}
	if _, err := tab.Begin(tok); err != nil {
		t.Fatal(err)
	}
}

// Connections issued, suspended, resumed and forgotten from many goroutines
// at once (run with -race) end with the table empty and consistent.
func TestTableConcurrent(t *testing.T) {
	tab, clk := newTestTable(t, 64)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				c := &conn{}
				tok, err := tab.Issue(c)
				if err != nil {
					t.Errorf("goroutine %d, conn %d: %v", g, i, err)
					return
				}
				tab.Suspend(c)
				at, err := tab.Begin(tok)
				if err != nil {
					t.Errorf("goroutine %d, conn %d: Begin: %v", g, i, err)
					return
				}
				if i%2 == 0 {
					tab.Abort(at)
				} else if err := tab.Commit(at); err != nil {
					t.Errorf("goroutine %d, conn %d: Commit: %v", g, i, err)
					return
				}
				tab.Forget(c)
			}
		})
	}
	wg.Go(func() {
		for range 100 {
			clk.Advance(time.Millisecond)
			tab.Len()
		}
	})
	wg.Wait()
	if v, tk, s := tableSizes(tab); v != 0 || tk != 0 || s != 0 {
		t.Fatalf("%d connections, %d tokens, %d suspended", v, tk, s)
	}
}

func TestNewTableRefusesBadConfig(t *testing.T) {
	for _, cfg := range []TableConfig{
		{MaxEntries: 0, Lifetime: time.Second},
		{MaxEntries: 1, Lifetime: 999 * time.Millisecond},
		{MaxEntries: 1, Lifetime: MaxLifetime + time.Second},
	} {
		if _, err := NewTable[*conn](cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	tab, err := NewTable[*conn](TableConfig{MaxEntries: 1, Lifetime: MaxLifetime})
	if err != nil || tab.Lifetime() != MaxLifetime {
		t.Fatal(err)
	}
	if tok, err := tab.Issue(&conn{}); err != nil || !tok.Valid() {
		t.Fatalf("crypto/rand by default: %v", err)
	}
}
