package main

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"time"
)

// maxPendingTests bounds the -P tests the server gathers at once, so that
// clients announcing streams that never come cannot grow it.
const maxPendingTests = 64

// testGroups gathers the streams of -P tests, so that each test is
// reported once, as the sum of its streams. A test's client dials every
// stream and sends every hello before any stream sends data, so a test
// whose streams have not all joined within the gather time of its first
// is broken: its slot is freed and the streams that came are dropped.
type testGroups struct {
	gather time.Duration
	report func(ServerResult)

	mu        sync.Mutex
	tests     map[string]*testGroup // until reported or given up; guarded by mu
	gathering int                   // tests some of whose streams have yet to join; guarded by mu
	stopped   bool                  // guarded by mu
}

// testGroup is one -P test; its fields are guarded by its testGroups' mu.
type testGroup struct {
	key     string
	want    int // streams the test announced
	joined  int
	active  int
	results []ServerResult
	drops   []func(error) // close the joined streams' connections
	timer   *time.Timer   // until every stream has joined
	expired bool          // not every stream joined in time
}

func newTestGroups(gather time.Duration, report func(ServerResult)) *testGroups {
	return &testGroups{tests: map[string]*testGroup{}, gather: gather, report: report}
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

// join counts a stream of the test in, at its hello; drop ends the
// stream's connection if the test's other streams do not come in time.
func (g *testGroups) join(key string, want int, drop func(error)) (*testGroup, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.tests[key]
	if t == nil {
		if g.gathering >= maxPendingTests {
			return nil, fmt.Errorf("refused: %d parallel tests are already being gathered, the most the server takes at once; each is given up when its streams do not all come within %v (-hello-timeout)", maxPendingTests, g.gather)
		}
		t = &testGroup{key: key, want: want}
		t.timer = time.AfterFunc(g.gather, func() { g.expire(t) })
		g.tests[key] = t
		g.gathering++
	}
	if t.want != want || t.joined >= want {
		return nil, fmt.Errorf("test %s: a stream announcing %d streams joined one of %d with %d already in", key, want, t.want, t.joined)
	}
	t.joined++
	t.active++
	t.drops = append(t.drops, drop)
	if t.joined == t.want {
		t.timer.Stop()
		t.drops = nil
		g.gathering--
	}
	return t, nil
}

// expire gives up a test whose streams have not all joined: it frees the
// test's slot and drops the streams that came, and the test is reported
// once they have finished.
func (g *testGroups) expire(t *testGroup) {
	g.mu.Lock()
	if g.stopped || t.joined == t.want || t.expired {
		g.mu.Unlock()
		return
	}
	g.forget(t)
	g.gathering--
	t.expired = true
	drops := t.drops
	t.drops = nil
	done := t.active == 0
	g.mu.Unlock()
	why := fmt.Errorf("dropped: only %d of the %d streams the client announced came within %v (-hello-timeout)", t.joined, t.want, g.gather)
	for _, drop := range drops {
		drop(why)
	}
	if done {
		g.report(sumResults(t.results, t.want))
	}
}

// finish adds a joined stream's result; the test is reported once every
// stream it announced has finished, or once the streams that came have
// when the rest did not come in time.
func (g *testGroups) finish(t *testGroup, res ServerResult) {
	g.mu.Lock()
	t.results = append(t.results, res)
	t.active--
	done := len(t.results) == t.want || (t.expired && t.active == 0)
	if done {
		g.forget(t)
	}
	g.mu.Unlock()
	if done {
		g.report(sumResults(t.results, t.want))
	}
}

// forget takes t out of the map, so that its key may start a new test.
// The caller holds g.mu.
func (g *testGroups) forget(t *testGroup) {
	if g.tests[t.key] == t {
		delete(g.tests, t.key)
	}
}

// stop drops the tests still gathered: the server is done.
func (g *testGroups) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	for key, t := range g.tests {
		t.timer.Stop()
		delete(g.tests, key)
	}
	g.gathering = 0
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
