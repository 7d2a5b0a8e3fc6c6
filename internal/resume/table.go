package resume

import (
	"container/list"
	"crypto/rand"
	"crypto/subtle"
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
	// resume; its tokens are refused after that. Whole seconds, since the
	// reply states it so, from 1 s to MaxTableLifetime; 0 means
	// DefaultLifetime.
	Lifetime time.Duration
	// Now is the clock; nil means time.Now. Tests inject one.
	Now func() time.Time
	// Rand is the source of tokens; nil means crypto/rand.
	Rand io.Reader
}

// DefaultLifetime is TableConfig.Lifetime's default. It outlasts the few
// seconds a dialer tries to resume by default, since the listener may see
// the path fail before the dialer does.
const DefaultLifetime = 10 * time.Second

// MaxTableLifetime caps TableConfig.Lifetime, well below the 18 hours the
// wire can state (MaxLifetime): a suspended connection keeps its rings
// pinned for the whole lifetime, and a peer that cuts its path and never
// comes back chooses that it does.
const MaxTableLifetime = 2 * time.Minute

// Path numbers the paths of one connection: 1 for the one it was issued on,
// one more after each committed resume. A report that a path failed names
// it, so that a late one about a path a resume has replaced (the old queue
// pair's flushed completions, polled after the new one is up) changes
// nothing.
type Path uint64

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
// valid, because the dialer may or may not have received the reply. A new
// resume that presents either replaces the attempt under way: the dialer
// sends one when the reply to the last was lost.
//
// Once a connection's path has failed (Suspend, or a Begin) it waits at most
// the Lifetime for a resume to be committed; past that its tokens are
// refused and the table forgets it. Forget it as soon as it ends otherwise.
//
// The table keeps each token only as its SHA-256, so that nothing it holds
// can be presented, printed or not. Every method takes one mutex for a
// constant amount of work: a map lookup, a token drawn on success, and at
// most sweepLimit expired connections forgotten. A wrong token costs a
// SHA-256 of 16 bytes outside the lock, one lookup and a look through the
// last retiredMemory tokens the table stopped taking, and stores nothing.
// The table never holds more than MaxEntries connections and 2 tokens for
// each, and those retiredMemory digests. It is safe for concurrent use.
type Table[V comparable] struct {
	maxEntries int
	lifetime   time.Duration
	now        func() time.Time
	rand       io.Reader

	mu sync.Mutex
	// Guarded by mu.
	byToken   map[tokenDigest]*entry[V] // every valid token, by its digest
	byValue   map[V]*entry[V]
	suspended list.List // *entry[V] whose path failed, by deadline, earliest first
	attempts  uint64    // the last Attempt's id
	// retired are the digests of the tokens refused most recently, each
	// with when and why, in a ring (next is the slot to write): so that
	// a refusal can say a token was valid until then, which tells a
	// dialer that came late from a forged or garbled token.
	retired [retiredMemory]retiredToken
	next    int
}

// retiredMemory is how many refused tokens a table remembers.
const retiredMemory = 64

// retiredToken is a token the table stopped taking.
type retiredToken struct {
	digest tokenDigest
	at     time.Time
	why    string
}

// Why a token was retired.
const (
	retiredEnded    = "its connection ended"
	retiredExpired  = "its connection waited longer than the lifetime"
	retiredReplaced = "a resume that presented the connection's other token replaced it"
	retiredUsed     = "a resume with it completed"
)

// entry is one connection. Its fields are guarded by the Table's mu.
type entry[V comparable] struct {
	value V
	// tokens[:ntokens] are the digests of the tokens that name the
	// connection: one, or two from a Begin until its Commit (the presented
	// one and the new one).
	tokens  [2]tokenDigest
	ntokens int
	path    Path // the path the connection is on, or was on when it failed
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
	presented tokenDigest // the presented token's digest, never the token
	id        uint64
}

// NewTable returns an empty table, or an error naming the bound of cfg that
// is out of range.
func NewTable[V comparable](cfg TableConfig) (*Table[V], error) {
	if cfg.MaxEntries < 1 {
		return nil, errors.New("resume: TableConfig.MaxEntries " + strconv.Itoa(cfg.MaxEntries) + " is below 1")
	}
	if cfg.Lifetime == 0 {
		cfg.Lifetime = DefaultLifetime
	}
	if cfg.Lifetime < time.Second || cfg.Lifetime > MaxTableLifetime || cfg.Lifetime%time.Second != 0 {
		return nil, errors.New("resume: TableConfig.Lifetime " + cfg.Lifetime.String() +
			" is not whole seconds from 1s to " + MaxTableLifetime.String())
	}
	t := &Table[V]{
		maxEntries: cfg.MaxEntries,
		lifetime:   cfg.Lifetime,
		now:        cfg.Now,
		rand:       cfg.Rand,
		byToken:    make(map[tokenDigest]*entry[V]),
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

// Issue gives the new connection v its first token, and the number of its
// path (1) for Suspend. ErrTableFull means v goes without resume: its reply
// does not set ConnDataFlag.
func (t *Table[V]) Issue(v V) (Token, Path, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.sweepLocked(now)
	if _, ok := t.byValue[v]; ok {
		return Token{}, 0, errIssued
	}
	if len(t.byValue) >= t.maxEntries {
		return Token{}, 0, ErrTableFull
	}
	tok, d, err := t.newTokenLocked()
	if err != nil {
		return Token{}, 0, err
	}
	e := &entry[V]{value: v, tokens: [2]tokenDigest{d}, ntokens: 1, path: 1}
	t.byValue[v] = e
	t.byToken[d] = e
	return tok, e.path, nil
}

// Suspend records that path p of v has failed: from now on v waits at most
// the lifetime for a resume. It returns the deadline (the first one, if v
// was suspended already). ok is false, and nothing changes, if the table
// does not know v or p is not v's current path: a late report about a path
// a resume has already replaced says nothing of the one in use.
func (t *Table[V]) Suspend(v V, p Path) (deadline time.Time, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.sweepLocked(now)
	e := t.byValue[v]
	if e == nil || e.path != p {
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
		t.removeLocked(e, retiredEnded)
	}
}

// Begin starts the resume of the connection that presented names. It fails
// with ErrUnknownToken (no such token: wrong, replayed, or its connection
// forgotten) or ErrExpired (the connection waited longer than the lifetime;
// the table forgets it). A resume of the connection already under way is
// replaced: its Commit fails and its Abort does nothing, so the listener
// ends its handshake. On success the connection counts as suspended, if it
// was not already: the new path is the sign that the old one failed.
func (t *Table[V]) Begin(presented Token) (Attempt[V], error) {
	d := presented.digest()
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	e := t.byToken[d]
	if e == nil || !e.holds(d) {
		t.sweepLocked(now)
		return Attempt[V]{}, t.unknownLocked(d, now)
	}
	if e.expired(now) {
		t.removeLocked(e, retiredExpired)
		t.sweepLocked(now)
		return Attempt[V]{}, ErrExpired
	}
	tok, td, err := t.newTokenLocked()
	if err != nil {
		return Attempt[V]{}, err
	}
	// The token not presented, if any, is dropped: the dialer presents the
	// newest it has, so the other is one it will not use again.
	for _, old := range e.tokens[:e.ntokens] {
		if old != d {
			delete(t.byToken, old)
			t.retireLocked(old, now, retiredReplaced)
		}
	}
	e.tokens, e.ntokens = [2]tokenDigest{d, td}, 2
	t.byToken[td] = e
	t.attempts++
	e.attempt = t.attempts
	t.suspendLocked(e, now)
	t.sweepLocked(now)
	return Attempt[V]{Value: e.value, Token: tok, Deadline: e.deadline, entry: e, presented: d, id: e.attempt}, nil
}

// Commit ends a resume whose connection is established again: the presented
// token is refused from now on, the new one alone names the connection, and
// the connection is no longer suspended. It returns the number of the new
// path, for Suspend. It fails, and the caller must end the new connection,
// with ErrUnknownToken if the connection was forgotten meanwhile (or a is
// not the attempt under way: a newer Begin replaced it) and with ErrExpired
// if the lifetime ran out first.
func (t *Table[V]) Commit(a Attempt[V]) (Path, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := a.entry
	if e == nil || t.byValue[e.value] != e || e.attempt != a.id {
		return 0, ErrUnknownToken
	}
	now := t.now()
	if e.expired(now) {
		t.removeLocked(e, retiredExpired)
		return 0, ErrExpired
	}
	delete(t.byToken, a.presented)
	t.retireLocked(a.presented, now, retiredUsed)
	e.tokens, e.ntokens = [2]tokenDigest{a.Token.digest()}, 1
	e.attempt = 0
	e.path++
	t.suspended.Remove(e.suspended)
	e.suspended, e.deadline = nil, time.Time{}
	return e.path, nil
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

// holds reports whether d is the digest of one of e's tokens, comparing
// each in constant time.
func (e *entry[V]) holds(d tokenDigest) bool {
	found := false
	for _, have := range e.tokens[:e.ntokens] {
		found = subtle.ConstantTimeCompare(have[:], d[:]) == 1 || found
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

func (t *Table[V]) removeLocked(e *entry[V], why string) {
	now := t.now()
	for _, d := range e.tokens[:e.ntokens] {
		delete(t.byToken, d)
		t.retireLocked(d, now, why)
	}
	if e.suspended != nil {
		t.suspended.Remove(e.suspended)
		e.suspended = nil
	}
	delete(t.byValue, e.value)
	e.attempt = 0
}

// retireLocked remembers that the token of digest d stopped being taken
// at now, and why.
func (t *Table[V]) retireLocked(d tokenDigest, now time.Time, why string) {
	t.retired[t.next] = retiredToken{digest: d, at: now, why: why}
	t.next = (t.next + 1) % retiredMemory
}

// unknownLocked is the error for a token of digest d that names no
// connection: ErrUnknownToken, saying when and why the table stopped
// taking it if it was one of the last retiredMemory it did.
func (t *Table[V]) unknownLocked(d tokenDigest, now time.Time) error {
	for i := range retiredMemory {
		r := &t.retired[(t.next+retiredMemory-1-i)%retiredMemory]
		if !r.at.IsZero() && r.digest == d {
			return &RetiredError{Ago: now.Sub(r.at), Why: r.why}
		}
	}
	return ErrUnknownToken
}

// RetiredError is ErrUnknownToken for a token the table took until lately.
type RetiredError struct {
	Ago time.Duration // how long ago it stopped taking it
	Why string
}

func (e *RetiredError) Error() string {
	return ErrUnknownToken.Error() + ": it was valid until " + e.Ago.Round(time.Millisecond).String() + " ago, when " + e.Why
}

func (e *RetiredError) Is(target error) bool { return target == ErrUnknownToken }

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
		t.removeLocked(e, retiredExpired)
	}
}

// errNoRandom: the random source gave tokens the table has again and
// again, which crypto/rand never does.
var errNoRandom = errors.New("resume: the random source gives only tokens already issued")

// newTokenLocked draws a token no connection in the table has, and its
// digest.
func (t *Table[V]) newTokenLocked() (Token, tokenDigest, error) {
	for range 4 {
		tok, err := newToken(t.rand)
		if err != nil {
			return Token{}, tokenDigest{}, err
		}
		d := tok.digest()
		if _, taken := t.byToken[d]; !taken {
			return tok, d, nil
		}
	}
	return Token{}, tokenDigest{}, errNoRandom
}
