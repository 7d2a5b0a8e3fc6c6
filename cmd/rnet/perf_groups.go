package main

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"time"
)

const (
	// maxPendingTests bounds the -P tests the server gathers at once, so
	// that clients announcing streams that never come cannot grow it.
	maxPendingTests = 64
	// groupGrace is how long a -P test whose connected streams have all
	// finished waits for the rest it announced before it is reported as
	// incomplete: its client dials every stream before any sends.
	groupGrace = 10 * time.Second
)

// testGroups gathers the streams of -P tests, so that each test is
// reported once, as the sum of its streams.
type testGroups struct {
	mu      sync.Mutex
	pending map[string]*testGroup
	grace   time.Duration
	stopped bool
}

type testGroup struct {
	want    int // streams the test announced
	joined  int
	active  int
	results []ServerResult
	timer   *time.Timer
}

func newTestGroups() *testGroups {
	return &testGroups{pending: map[string]*testGroup{}, grace: groupGrace}
}

// groupKey names a test by its client's host and id: ids are random, and
// two clients may draw the same.
func groupKey(c net.Conn, test uint32) string {
	host := c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return fmt.Sprintf("%s/%08x", host, test)
}

// join counts a stream of the test in, at its hello.
func (g *testGroups) join(key string, want int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.pending[key]
	if t == nil {
		if len(g.pending) >= maxPendingTests {
			return fmt.Errorf("%d parallel tests are already being gathered (the most the server takes at once)", maxPendingTests)
		}
		t = &testGroup{want: want}
		g.pending[key] = t
	}
	if t.want != want || t.joined >= want {
		return fmt.Errorf("test %s: a stream announcing %d streams joined one of %d with %d already in", key, want, t.want, t.joined)
	}
	t.joined++
	t.active++
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	return nil
}

// finish adds a joined stream's result; report gets the test's once every
// stream it announced has finished, or once its grace has passed.
func (g *testGroups) finish(key string, res ServerResult, report func(ServerResult)) {
	g.mu.Lock()
	t := g.pending[key]
	if t == nil {
		g.mu.Unlock()
		return // reported as incomplete already
	}
	t.results = append(t.results, res)
	t.active--
	complete := len(t.results) == t.want
	if complete {
		delete(g.pending, key)
	} else if t.active == 0 {
		t.timer = time.AfterFunc(g.grace, func() {
			g.mu.Lock()
			late := g.stopped || g.pending[key] != t || t.active > 0
			if !late {
				delete(g.pending, key)
			}
			g.mu.Unlock()
			if !late {
				report(sumResults(t.results, t.want))
			}
		})
	}
	g.mu.Unlock()
	if complete {
		report(sumResults(t.results, t.want))
	}
}

// stop drops the tests still gathered: the server is done.
func (g *testGroups) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	for key, t := range g.pending {
		if t.timer != nil {
			t.timer.Stop()
		}
		delete(g.pending, key)
	}
}

// sumResults is a -P test's result: its streams' sums over the time from
// the first stream's start to the last one's end.
func sumResults(streams []ServerResult, want int) ServerResult {
	slices.SortFunc(streams, func(a, b ServerResult) int { return a.Stream - b.Stream })
	first := streams[0]
	sum := ServerResult{
		Test: first.Test, Transport: first.Transport, Fallback: first.Fallback, Client: first.Client,
		Reverse: first.Reverse, Parallel: want, Size: first.Size, start: first.start, end: first.end, Streams: streams,
	}
	if h, _, err := net.SplitHostPort(first.Client); err == nil {
		sum.Client = h
	}
	for _, s := range streams {
		sum.Bytes += s.Bytes
		sum.Reads += s.Reads
		sum.Writes += s.Writes
		sum.Messages += s.Messages
		if s.start.Before(sum.start) {
			sum.start = s.start
		}
		if s.end.After(sum.end) {
			sum.end = s.end
		}
		if sum.Error == "" && s.Error != "" {
			sum.Error = fmt.Sprintf("stream %d: %s", s.Stream, s.Error)
		}
	}
	if len(streams) < want && sum.Error == "" {
		sum.Error = fmt.Sprintf("only %d of the %d streams the client announced came", len(streams), want)
	}
	sum.Seconds = sum.end.Sub(sum.start).Seconds()
	return sum
}
