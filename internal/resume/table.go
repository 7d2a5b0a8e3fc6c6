package resume

import (
	"container/list"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"
)

// TableConfig sets a Table's bounds.
type TableConfig struct {
	// MaxEntries bounds the connections the table keeps; past it a new
	// connection goes without resume (ErrTableFull). At least 1.
	MaxEntries int
	// Lifetime is how long a connection whose path has failed waits for a
	// resume; its tokens are refused after that. 1 s to MaxLifetime.
	Lifetime time.Duration
	// Now is the clock; nil means time.Now. Tests inject one.
	Now func() time.Time
	// Rand is the source of tokens; nil means crypto/rand.
	Rand io.Reader
}

// sweepLimit bounds how many expired connections one call forgets, so that
// no call holds the lock for work a crowd of expiries sets the length of.
// Each call that can add a connection or a suspension sweeps, so expired
// connections leave at least as fast as new ones come.
const sweepLimit = 4

// Table is a listener's record of the connections it can resume, by token.
// A connection has one token while its path is up; a resume presents it
// (Begin), gets a new one for the reply, and the presented one is refused
// once the resumed connection is established (Commit), so a replay never
// succeeds. If the resume's handshake fails instead (Abort), both stay
// valid, because the dialer may or may not have received the reply.
//
// Once a connection's path has failed (Suspend, or a Begin) it waits at most
// the Lifetime for a resume to be committed; past that its tokens are
// refused and the table forgets it. Forget it as soon as it ends otherwise.
//
// Every method takes one mutex for a constant amount of work: a map lookup,
// a token drawn on success, and at most sweepLimit expired connections
// forgotten. A wrong token costs a SHA-256 of 16 bytes outside the lock and
// one lookup, and stores nothing. The table never holds more than
// MaxEntries connections and 2 tokens for each. It is safe for concurrent
// use.
type Table[V comparable] struct {
	maxEntries int
	lifetime   time.Duration
	now        func() time.Time
	rand       io.Reader

	mu sync.Mutex
	// Guarded by mu.
	byToken   map[[sha256.Size]byte]*entry[V] // every valid token, by its digest
	byValue   map[V]*entry[V]
	suspended list.List // *entry[V] whose path failed, by deadline, earliest first
	attempts  uint64    // the last Attempt's id
}

// entry is one connection. Its fields are guarded by the Table's mu.
type entry[V comparable] struct {
	value V
	// tokens[:ntokens] name the connection: one, or two from a Begin until
	// its Commit (the presented one and the new one).
	tokens  [2]Token
	ntokens int
	// suspended is the entry's element in Table.suspended while its path
	// has failed, nil while it is up; deadline is when it expires.
	suspended *list.Element
	deadline  time.Time
	attempt   uint64 // the id of the Attempt under way, 0 if none
}

// Attempt is a resume that has presented a valid token and whose handshake
// is under way: the listener replies with Token, then Commits once the
// connection is established or Aborts if the handshake fails.
type Attempt[V comparable] struct {
	Value V     // the connection to resume
	Token Token // its new token, for the reply
	// Deadline is when the connection expires unless committed first.
	Deadline time.Time

	entry     *entry[V]
	presented Token
	id        uint64
}

// NewTable returns an empty table, or an error naming the bound of cfg that
// is out of range.
func NewTable[V comparable](cfg TableConfig) (*Table[V], error) {
	if cfg.MaxEntries < 1 {
		return nil, errors.New("resume: TableConfig.MaxEntries " + strconv.Itoa(cfg.MaxEntries) + " is below 1")
	}
	if cfg.Lifetime < time.Second || cfg.Lifetime > MaxLifetime {
		return nil, errors.New("resume: TableConfig.Lifetime " + cfg.Lifetime.String() + " is outside 1s to " + MaxLifetime.String())
	}
	t := &Table[V]{
		maxEntries: cfg.MaxEntries,
		lifetime:   cfg.Lifetime,
		now:        cfg.Now,
		rand:       cfg.Rand,
		byToken:    make(map[[sha256.Size]byte]*entry[V]),
		byValue:    make(map[V]*entry[V]),
	}
	if t.now == nil {
		t.now = time.Now
	}
	if t.rand == nil {
		t.rand = rand.Reader
	}
	return t, nil
}

// Lifetime is the table's lifetime, for the replies.
func (t *Table[V]) Lifetime() time.Duration { return t.lifetime }

// Len is the number of connections the table keeps.
func (t *Table[V]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byValue)
}

// errIssued: Issue called twice for one connection, a bug of the caller's.
var errIssued = errors.New("resume: the connection already has a token")

// Issue gives the new connection v its first token. ErrTableFull means v
// goes without resume: its reply does not set ConnDataFlag.
func (t *Table[V]) Issue(v V) (Token, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.sweepLocked(now)
	if _, ok := t.byValue[v]; ok {
		return Token{}, errIssued
	}
	if len(t.byValue) >= t.maxEntries {
		return Token{}, ErrTableFull
	}
	tok, err := t.newTokenLocked()
	if err != nil {
		return Token{}, err
	}
	e := &entry[V]{value: v, tokens: [2]Token{tok}, ntokens: 1}
	t.byValue[v] = e
	t.byToken[tok.digest()] = e
	return tok, nil
}

// Suspend records that v's path has failed: from now on it waits at most
// the lifetime for a resume. It returns the deadline (the first one, if v
// was suspended already), and false if the table does not know v.
func (t *Table[V]) Suspend(v V) (deadline time.Time, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.sweepLocked(now)
	e := t.byValue[v]
	if e == nil {
		return time.Time{}, false
	}
	t.suspendLocked(e, now)
	return e.deadline, true
}

// Forget drops v and its tokens: its connection has ended. Forgetting a
// connection the table does not know does nothing.
func (t *Table[V]) Forget(v V) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.byValue[v]; e != nil {
		t.removeLocked(e)
	}
}

// Begin starts the resume of the connection that presented names. It fails
// with ErrUnknownToken (no such token: wrong, replayed, or its connection
// forgotten), ErrExpired (the connection waited longer than the lifetime;
// the table forgets it) or ErrBusy (another resume of it is under way).
// On success the connection counts as suspended, if it was not already:
// the new path is the sign that the old one failed.
func (t *Table[V]) Begin(presented Token) (Attempt[V], error) {
	d := presented.digest()
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	e := t.byToken[d]
	if e == nil || !e.holds(presented) {
		t.sweepLocked(now)
		return Attempt[V]{}, ErrUnknownToken
	}
	if e.expired(now) {
		t.removeLocked(e)
		t.sweepLocked(now)
		return Attempt[V]{}, ErrExpired
	}
	if e.attempt != 0 {
		return Attempt[V]{}, ErrBusy
	}
	tok, err := t.newTokenLocked()
	if err != nil {
		return Attempt[V]{}, err
	}
	// The token not presented, if any, is dropped: the dialer presents the
	// newest it has, so the other is one it will not use again.
	for _, old := range e.tokens[:e.ntokens] {
		if !old.Equal(presented) {
			delete(t.byToken, old.digest())
		}
	}
	e.tokens, e.ntokens = [2]Token{presented, tok}, 2
	t.byToken[tok.digest()] = e
	t.attempts++
	e.attempt = t.attempts
	t.suspendLocked(e, now)
	t.sweepLocked(now)
	return Attempt[V]{Value: e.value, Token: tok, Deadline: e.deadline, entry: e, presented: presented, id: e.attempt}, nil
}

// Commit ends a resume whose connection is established again: the presented
// token is refused from now on, the new one alone names the connection, and
// the connection is no longer suspended. It fails, and the caller must end
// the new connection, with ErrUnknownToken if the connection was forgotten
// meanwhile (or a is not the attempt under way) and with ErrExpired if the
// lifetime ran out first.
func (t *Table[V]) Commit(a Attempt[V]) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := a.entry
	if e == nil || t.byValue[e.value] != e || e.attempt != a.id {
		return ErrUnknownToken
	}
	if e.expired(t.now()) {
		t.removeLocked(e)
		return ErrExpired
	}
	delete(t.byToken, a.presented.digest())
	e.tokens, e.ntokens = [2]Token{a.Token}, 1
	e.attempt = 0
	t.suspended.Remove(e.suspended)
	e.suspended, e.deadline = nil, time.Time{}
	return nil
}

// Abort ends a resume whose handshake failed. The connection stays
// suspended with its first deadline, and both tokens stay valid: the dialer
// may or may not have received the new one. Aborting an attempt that is
// not under way does nothing.
func (t *Table[V]) Abort(a Attempt[V]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := a.entry
	if e == nil || t.byValue[e.value] != e || e.attempt != a.id {
		return
	}
	e.attempt = 0
}

// holds reports whether tok is one of e's tokens, comparing each in
// constant time.
func (e *entry[V]) holds(tok Token) bool {
	found := false
	for _, have := range e.tokens[:e.ntokens] {
		found = have.Equal(tok) || found
	}
	return found
}

func (e *entry[V]) expired(now time.Time) bool {
	return e.suspended != nil && !now.Before(e.deadline)
}

func (t *Table[V]) suspendLocked(e *entry[V], now time.Time) {
	if e.suspended != nil {
		return
	}
	// Every deadline is now plus the same lifetime, so appending keeps
	// the list in deadline order.
	e.deadline = now.Add(t.lifetime)
	e.suspended = t.suspended.PushBack(e)
}

func (t *Table[V]) removeLocked(e *entry[V]) {
	for _, tok := range e.tokens[:e.ntokens] {
		delete(t.byToken, tok.digest())
	}
	if e.suspended != nil {
		t.suspended.Remove(e.suspended)
		e.suspended = nil
	}
	delete(t.byValue, e.value)
	e.attempt = 0
}

// sweepLocked forgets up to sweepLimit connections whose lifetime has run
// out, earliest first.
func (t *Table[V]) sweepLocked(now time.Time) {
	for range sweepLimit {
		front := t.suspended.Front()
		if front == nil {
			return
		}
		e := front.Value.(*entry[V])
		if !e.expired(now) {
			return
		}
		t.removeLocked(e)
	}
}

// newTokenLocked draws a token no connection in the table has.
func (t *Table[V]) newTokenLocked() (Token, error) {
	for range 4 {
		tok, err := newToken(t.rand)
		if err != nil {
			return Token{}, err
		}
		if _, taken := t.byToken[tok.digest()]; !taken {
			return tok, nil
		}
	}
	return Token{}, errNoRandom
}
