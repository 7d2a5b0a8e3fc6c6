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
	tok, _, err := tab.Issue(a)
	if err != nil {
		t.Fatal(err)
	}
	deadline, ok := tab.Suspend(a, 1)
	if !ok || !deadline.Equal(clk.Now().Add(10*time.Second)) {
		t.Fatalf("Suspend = %v, %v", deadline, ok)
	}
	clk.Advance(9 * time.Second)
	at, err := tab.Begin(tok)
	if err != nil {
		t.Fatal(err)
	}
	if at.Value != a || at.Token.Equal(tok) || !at.Deadline.Equal(deadline) {
		t.Fatalf("attempt %+v", at)
	}
	if _, err := tab.Commit(at); err != nil {
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
	if _, err := tab.Commit(at2); err != nil {
		t.Fatal(err)
	}
}

func TestTableRefusesWrongToken(t *testing.T) {
	tab, _ := newTestTable(t, 4)
	tok, _, err := tab.Issue(&conn{"a"})
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
	tok, _, _ := tab.Issue(&conn{"a"})
	at, err := tab.Begin(tok)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Commit(at); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Begin(tok); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("replayed after the resume: %v", err)
	}
	if v, tk, s := tableSizes(tab); v != 1 || tk != 1 || s != 0 {
		t.Fatalf("the used token is still filed: %d connections, %d tokens, %d suspended", v, tk, s)
	}
	// Committing the same attempt again does nothing.
	if _, err := tab.Commit(at); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("second commit: %v", err)
	}
}

// A resume request while another runs replaces it, whichever token it
// presents: the dialer sends one when the reply to the last was lost, and
// only a token holder can. The replaced attempt can no longer commit.
func TestTableNewResumeReplacesAttempt(t *testing.T) {
	for _, presentNew := range []bool{false, true} {
		tab, clk := newTestTable(t, 4)
		a := &conn{"a"}
		tok, _, _ := tab.Issue(a)
		first, err := tab.Begin(tok)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		again := tok
		if presentNew {
			again = first.Token
		}
		second, err := tab.Begin(again)
		if err != nil {
			t.Fatalf("presentNew=%v: a second request: %v", presentNew, err)
		}
		if second.Token.Equal(first.Token) || !second.Deadline.Equal(first.Deadline) {
			t.Fatalf("presentNew=%v: second attempt %+v after %+v", presentNew, second, first)
		}
		if v, tk, s := tableSizes(tab); v != 1 || tk != 2 || s != 1 {
			t.Fatalf("presentNew=%v: %d connections, %d tokens, %d suspended", presentNew, v, tk, s)
		}
		if _, err := tab.Commit(first); !errors.Is(err, ErrUnknownToken) {
			t.Fatalf("presentNew=%v: the replaced attempt commits: %v", presentNew, err)
		}
		tab.Abort(first) // does nothing to the attempt under way
		if _, err := tab.Commit(second); err != nil {
			t.Fatalf("presentNew=%v: %v", presentNew, err)
		}
		for _, old := range []Token{tok, first.Token} {
			if _, err := tab.Begin(old); !errors.Is(err, ErrUnknownToken) {
				t.Fatalf("presentNew=%v: a token of a replaced attempt: %v", presentNew, err)
			}
		}
	}
}

// The old path's failure reported after a resume moved the connection (its
// queue pair's flushes polled late) leaves the connection up: the lifetime
// does not start, and its token still resumes it long after.
func TestTableIgnoresLateReportOfOldPath(t *testing.T) {
	tab, clk := newTestTable(t, 4)
	a := &conn{"a"}
	tok, oldPath, err := tab.Issue(a)
	if err != nil {
		t.Fatal(err)
	}
	at, err := tab.Begin(tok) // the listener moves the old queue pair to error
	if err != nil {
		t.Fatal(err)
	}
	newPath, err := tab.Commit(at)
	if err != nil {
		t.Fatal(err)
	}
	if newPath == oldPath {
		t.Fatalf("the resumed connection is still on path %d", oldPath)
	}
	if _, ok := tab.Suspend(a, oldPath); ok {
		t.Fatal("a late report about the old path suspended the connection")
	}
	if _, _, s := tableSizes(tab); s != 0 {
		t.Fatalf("%d suspended after a late report", s)
	}
	clk.Advance(time.Hour)
	if n := tab.Len(); n != 1 {
		t.Fatalf("%d connections kept, want the resumed one", n)
	}
	at2, err := tab.Begin(at.Token)
	if err != nil {
		t.Fatalf("resuming again after the late report: %v", err)
	}
	// A report about the path in use does suspend it.
	if _, err := tab.Commit(at2); err != nil {
		t.Fatal(err)
	}
	if _, ok := tab.Suspend(a, newPath); ok {
		t.Fatal("path 2's report after path 3 took over")
	}
	if d, ok := tab.Suspend(a, newPath+1); !ok || !d.Equal(clk.Now().Add(10*time.Second)) {
		t.Fatalf("the current path's report: %v, %v", d, ok)
	}
}

func TestTableRefusesExpiredToken(t *testing.T) {
	tab, clk := newTestTable(t, 4)
	a := &conn{"a"}
	tok, _, _ := tab.Issue(a)
	// A connection whose path is up does not expire.
	clk.Advance(time.Hour)
	if _, ok := tab.Suspend(a, 1); !ok {
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
	tokA, _, _ := tab.Issue(a)
	tokB, _, _ := tab.Issue(b)
	atA, err := tab.Begin(tokA)
	if err != nil {
		t.Fatal(err)
	}
	atB, err := tab.Begin(tokB)
	if err != nil {
		t.Fatal(err)
	}
	tab.Forget(b)
	if _, err := tab.Commit(atB); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("commit after Forget: %v", err)
	}
	clk.Advance(10 * time.Second)
	if _, err := tab.Commit(atA); !errors.Is(err, ErrExpired) {
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
		old, _, _ := tab.Issue(a)
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
		if _, err := tab.Commit(at2); err != nil {
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

// The lookup by digest is checked against the entry's digests in constant
// time.
func TestEntryHolds(t *testing.T) {
	other := testToken
	other[9] ^= 1
	e := &entry[*conn]{tokens: [2]tokenDigest{testToken.digest(), other.digest()}, ntokens: 1}
	if !e.holds(testToken.digest()) || e.holds(other.digest()) || e.holds(Token{}.digest()) {
		t.Fatal("one token held: wrong answers")
	}
	e.ntokens = 2
	if !e.holds(testToken.digest()) || !e.holds(other.digest()) {
		t.Fatal("two tokens held: wrong answers")
	}
}

func TestTableForget(t *testing.T) {
	tab, _ := newTestTable(t, 4)
	a := &conn{"a"}
	tok, _, _ := tab.Issue(a)
	tab.Suspend(a, 1)
	tab.Forget(a)
	tab.Forget(a)
	if _, err := tab.Begin(tok); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("after Forget: %v", err)
	}
	if _, ok := tab.Suspend(a, 1); ok {
		t.Fatal("Suspend of a forgotten connection")
	}
	if v, tk, s := tableSizes(tab); v != 0 || tk != 0 || s != 0 {
		t.Fatalf("%d connections, %d tokens, %d suspended", v, tk, s)
	}
	if _, _, err := tab.Issue(a); err != nil {
		t.Fatalf("issuing again after Forget: %v", err)
	}
	if _, _, err := tab.Issue(a); !errors.Is(err, errIssued) {
		t.Fatalf("second Issue: %v", err)
	}
}

// A full table takes no more connections until one ends or expires; an
// expired one makes room without anyone forgetting it.
func TestTableBounded(t *testing.T) {
	tab, clk := newTestTable(t, 3)
	conns := []*conn{{"a"}, {"b"}, {"c"}}
	for _, c := range conns {
		if _, _, err := tab.Issue(c); err != nil {
			t.Fatal(err)
		}
	}
	d := &conn{"d"}
	if _, _, err := tab.Issue(d); !errors.Is(err, ErrTableFull) {
		t.Fatalf("fourth in a table of 3: %v", err)
	}
	tab.Suspend(conns[0], 1)
	clk.Advance(5 * time.Second)
	tab.Suspend(conns[1], 1)
	if _, _, err := tab.Issue(d); !errors.Is(err, ErrTableFull) {
		t.Fatalf("nothing expired yet: %v", err)
	}
	clk.Advance(5 * time.Second) // a's deadline
	if _, _, err := tab.Issue(d); err != nil {
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
		if _, _, err := tab.Issue(c); err != nil {
			t.Fatal(i, err)
		}
		tab.Suspend(c, 1)
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
	tok, _, _ := tab.Issue(a)
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
				tok, _, err := tab.Issue(c)
				if err != nil {
					t.Errorf("goroutine %d, conn %d: %v", g, i, err)
					return
				}
				tab.Suspend(c, 1)
				at, err := tab.Begin(tok)
				if err != nil {
					t.Errorf("goroutine %d, conn %d: Begin: %v", g, i, err)
					return
				}
				if i%2 == 0 {
					tab.Abort(at)
				} else if _, err := tab.Commit(at); err != nil {
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
		{MaxEntries: 1, Lifetime: 2500 * time.Millisecond}, // the reply states whole seconds
		{MaxEntries: 1, Lifetime: MaxTableLifetime + time.Second},
		{MaxEntries: 1, Lifetime: MaxLifetime},
		{MaxEntries: 1, Lifetime: -time.Second},
	} {
		if _, err := NewTable[*conn](cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	if MaxTableLifetime >= MaxLifetime/100 {
		t.Fatalf("the cap %v is not well below the wire's %v", MaxTableLifetime, MaxLifetime)
	}
	tab, err := NewTable[*conn](TableConfig{MaxEntries: 1})
	if err != nil || tab.Lifetime() != DefaultLifetime {
		t.Fatalf("no lifetime: %v, %v", tab.Lifetime(), err)
	}
	tab, err = NewTable[*conn](TableConfig{MaxEntries: 1, Lifetime: MaxTableLifetime})
	if err != nil || tab.Lifetime() != MaxTableLifetime {
		t.Fatal(err)
	}
	if _, _, err := tab.Issue(&conn{}); err != nil {
		t.Fatalf("crypto/rand by default: %v", err)
	}
}
