package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rnet-dev/rnet/rnet"
)

// serverLimits bound what the clients of `rnet perf -s` can make it hold,
// together and for how long: clients are strangers, and a benchmark server
// must outlive a careless or hostile one.
type serverLimits struct {
	helloTimeout time.Duration // -hello-timeout
	idleTimeout  time.Duration // -idle-timeout
	maxConns     int           // -max-conns
	maxPinned    int64         // -max-pinned
	maxBuffered  int64         // -max-buffered
}

// The limits' defaults: room for two -P 128 tests at once, with rings of
// up to 1 MiB (rstream's size) and every stream reading 1 MiB at a time.
const (
	defaultHelloTimeout = 10 * time.Second
	defaultIdleTimeout  = time.Minute
	defaultMaxConns     = 256
	defaultMaxPinned    = 1 << 30
	defaultMaxBuffered  = 256 << 20
)

func defaultServerLimits() serverLimits {
	return serverLimits{defaultHelloTimeout, defaultIdleTimeout, defaultMaxConns, defaultMaxPinned, defaultMaxBuffered}
}

func (l *serverLimits) register(fs *flag.FlagSet) {
	fs.DurationVar(&l.helloTimeout, "hello-timeout", defaultHelloTimeout, "server: how long a client has for its hello and first message, and a -P test for all its streams' hellos")
	fs.DurationVar(&l.idleTimeout, "idle-timeout", defaultIdleTimeout, "server: drop a client whose connection moves no byte in this long (a ping -i longer than it needs a longer one)")
	fs.IntVar(&l.maxConns, "max-conns", defaultMaxConns, "server: the most connections served at once")
	l.maxPinned, l.maxBuffered = defaultMaxPinned, defaultMaxBuffered
	fs.Var(byteSize[int64]{&l.maxPinned}, "max-pinned", "server: `bytes` the rings of the RDMA connections served at once may pin together, each counted at its -buffer maximum")
	fs.Var(byteSize[int64]{&l.maxBuffered}, "max-buffered", "server: `bytes` of read buffers and ping messages held for the clients served at once")
}

// check returns what is wrong with the limits, for a usage error.
func (l serverLimits) check() error {
	if l.helloTimeout <= 0 || l.idleTimeout <= 0 || l.maxConns <= 0 || l.maxPinned <= 0 || l.maxBuffered <= 0 {
		return errors.New("-hello-timeout, -idle-timeout, -max-conns, -max-pinned and -max-buffered must be positive")
	}
	return nil
}

// pinnedMax is the most an accepted connection's rings pin, both at their
// maximum, each region rounded up to whole pages as it is registered: the
// send ring with its control slots and (on iWARP) a word per send queue
// entry, the receive ring, and the page of the peer's SGL updates.
func pinnedMax(cfg rnet.Config) int64 {
	const ctrlSlots, msgWords = 4 * 16, 4
	send := cfg.SendBufferSize + ctrlSlots + cfg.SendQueueSize*msgWords
	return wholePages(send) + wholePages(cfg.RecvBufferSize) + wholePages(1)
}

func wholePages(n int) int64 {
	page := int64(os.Getpagesize())
	return (int64(n) + page - 1) / page * page
}

// byteBudget is memory that connections take from and give back.
type byteBudget struct {
	size int64
	mu   sync.Mutex
	left int64 // guarded by mu
}

func newByteBudget(size int64) *byteBudget { return &byteBudget{size: size, left: size} }

// take takes n bytes if that many are left.
func (b *byteBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.left {
		return false
	}
	b.left -= n
	return true
}

func (b *byteBudget) give(n int64) {
	b.mu.Lock()
	b.left += n
	b.mu.Unlock()
}

func (b *byteBudget) held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.size - b.left
}

// connGuard drops a connection whose client stalls the server: one whose
// hello and first message do not come within the hello timeout of the
// accept, or on which no byte moves, either way, for a whole idle period.
// Dropping closes the connection, which ends the server's blocked call.
type connGuard struct {
	c     net.Conn
	idle  time.Duration
	moved atomic.Uint64 // calls that moved bytes, counted by guardedConn
	// transported, if set, counts the bytes the connection's transport
	// has carried either way.
	transported func() uint64

	mu      sync.Mutex
	timer   *time.Timer // guarded by mu
	begun   bool        // the first message is in: idle periods are checked; guarded by mu
	seen    uint64      // moved at the last check; guarded by mu
	stopped bool        // guarded by mu
	dropped error       // why the guard closed c; guarded by mu
}

func newConnGuard(c net.Conn, l serverLimits) *connGuard {
	g := &connGuard{c: c, idle: l.idleTimeout}
	if rc, ok := c.(*rnet.Conn); ok {
		// The transport's bytes show a long Write or Read moving too.
		g.transported = func() uint64 {
			st := rc.Stats()
			return st.BytesSent + st.BytesReceived
		}
	}
	g.mu.Lock()
	g.timer = time.AfterFunc(l.helloTimeout, func() {
		g.mu.Lock()
		late := g.begun
		g.mu.Unlock()
		if !late {
			g.drop(fmt.Errorf("dropped: no hello and first message within %v (-hello-timeout)", l.helloTimeout))
		}
	})
	g.mu.Unlock()
	return g
}

// begin ends the hello's deadline: from now on the connection is dropped
// when a whole idle period passes with nothing moved.
func (g *connGuard) begin() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.begun || g.stopped || g.dropped != nil {
		return
	}
	g.begun = true
	g.timer.Stop()
	g.seen = g.progress()
	g.timer = time.AfterFunc(g.idle, g.check)
}

// progress is a count that grows whenever bytes move on the connection.
func (g *connGuard) progress() uint64 {
	n := g.moved.Load()
	if g.transported != nil {
		n += g.transported()
	}
	return n
}

func (g *connGuard) check() {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return
	}
	if now := g.progress(); now != g.seen {
		g.seen = now
		g.timer.Reset(g.idle)
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	g.drop(fmt.Errorf("dropped: no byte moved for %v (-idle-timeout)", g.idle))
}

// drop closes the connection for reason, unless the guard was stopped.
func (g *connGuard) drop(reason error) {
	g.mu.Lock()
	if g.stopped || g.dropped != nil {
		g.mu.Unlock()
		return
	}
	g.dropped = reason
	g.timer.Stop()
	g.mu.Unlock()
	g.c.Close()
}

// stop ends the guard's checks: the connection is done.
func (g *connGuard) stop() {
	g.mu.Lock()
	g.stopped = true
	g.timer.Stop()
	g.mu.Unlock()
}

// cause is err, or why the guard dropped the connection if it did: the
// call's own error is then only the closed connection.
func (g *connGuard) cause(err error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil && g.dropped != nil {
		return g.dropped
	}
	return err
}

// guardedConn counts the calls that move bytes for its guard.
type guardedConn struct {
	net.Conn
	g *connGuard
}

func (c guardedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.g.moved.Add(1)
	}
	return n, err
}

func (c guardedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.g.moved.Add(1)
	}
	return n, err
}

// refusalLog prints the server's refusals of new connections, at most one
// line a second, so that a flood of them cannot flood its output.
type refusalLog struct {
	w      io.Writer
	mu     sync.Mutex
	last   time.Time // guarded by mu
	unsaid int       // refusals since the last line; guarded by mu
}

func (r *refusalLog) refused(remote net.Addr, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if !r.last.IsZero() && now.Sub(r.last) < time.Second {
		r.unsaid++
		return
	}
	more := ""
	if r.unsaid > 0 {
		more = fmt.Sprintf(" (and %d more refused since the last line)", r.unsaid)
	}
	fmt.Fprintf(r.w, "rnet perf: refused %s: %s%s\n", remote, why, more)
	r.last, r.unsaid = now, 0
}
