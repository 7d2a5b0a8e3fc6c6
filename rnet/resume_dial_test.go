package rnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestResumeCandidates(t *testing.T) {
	ap := netip.MustParseAddrPort
	got := resumeCandidates([]netip.AddrPort{ap("10.1.0.2:7471"), ap("[fd00::2]:7471"), ap("10.0.0.2:7471")}, ap("[::ffff:10.0.0.2]:7471"), ap("[::ffff:10.0.0.2]:7471"))
	if s := fmtAddrs(got); s != "[10.1.0.2:7471 [fd00::2]:7471 10.0.0.2:7471]" {
		t.Errorf("candidates %s: want the reply's, then the one dialled, each once", s)
	}
	if s := fmtAddrs(resumeCandidates(nil, ap("10.0.0.2:7471"), ap("10.0.0.2:7471"))); s != "[10.0.0.2:7471]" {
		t.Errorf("without reply addresses: %s", s)
	}
	// After a resume through 10.1.0.2, whose reply leaves it out, it
	// comes after the reply's and before the one dialled.
	got = resumeCandidates([]netip.AddrPort{ap("[fd00::2]:7471"), ap("[fd01::2]:7471")}, ap("10.1.0.2:7471"), ap("10.0.0.2:7471"))
	if s := fmtAddrs(got); s != "[[fd00::2]:7471 [fd01::2]:7471 10.1.0.2:7471 10.0.0.2:7471]" {
		t.Errorf("candidates after a resume %s: want the reply's, the one it reached, then the one dialled", s)
	}
}

// fakePaths is a fabric for resumePaths.race: each address behaves as
// its entry says, and the fake counts what race did.
type fakePaths struct {
	// how each address behaves: "dead" never resolves (until its
	// context ends), "noroute" fails to resolve, "refuse" connects and is
	// refused, "forgotten" is refused with reason 6, "ok" connects.
	behave map[netip.AddrPort]string

	// onDead, if not nil, is called when a dead address starts resolving.
	onDead func()
	// deadEnded says a dead address's resolution has returned; connectedEarly
	// lists the connects made before that.
	deadEnded      atomic.Bool
	connectedEarly []netip.AddrPort
	// avoid holds the addresses whose routes leave through the failed
	// device.
	avoid map[netip.AddrPort]bool
	// rank, if it has an address, ranks its route among the avoided ones
	// (1 first); an avoided address without one ranks 1.
	rank map[netip.AddrPort]int
	// devices, if not nil, names the local device of each address's
	// route.
	devices map[netip.AddrPort]string
	// slowAnswer is how long a "slow" address takes to answer.
	slowAnswer time.Duration

	mu                  sync.Mutex
	resolved, released  []netip.AddrPort
	connected           []netip.AddrPort
	connecting, overlap int
	routes              atomic.Int64 // resolved and not yet connected or released
}

func (f *fakePaths) paths(t *testing.T) resumePaths[netip.AddrPort, string] {
	p := resumePaths[netip.AddrPort, string]{
		resolve: func(ctx context.Context, to netip.AddrPort) (netip.AddrPort, error) {
			switch f.behave[to] {
			case "dead":
				if f.onDead != nil {
					f.onDead()
				}
				<-ctx.Done()
				f.deadEnded.Store(true)
				return netip.AddrPort{}, ctx.Err()
			case "noroute":
				return netip.AddrPort{}, errors.New("no route to host")
			}
			f.mu.Lock()
			f.resolved = append(f.resolved, to)
			f.mu.Unlock()
			f.routes.Add(1)
			return to, nil
		},
		connect: func(ctx context.Context, to, route netip.AddrPort) (string, error) {
			f.routes.Add(-1)
			f.mu.Lock()
			f.connecting++
			f.overlap = max(f.overlap, f.connecting)
			f.connected = append(f.connected, to)
			if !f.deadEnded.Load() {
				f.connectedEarly = append(f.connectedEarly, to)
			}
			f.mu.Unlock()
			defer func() {
				f.mu.Lock()
				f.connecting--
				f.mu.Unlock()
			}()
			switch f.behave[to] {
			case "refuse":
				return "", errors.New("connection refused")
			case "forgotten":
				return "", fmt.Errorf("%w: rejected", errResumeForgotten)
			case "silent":
				<-ctx.Done()
				return "", ctx.Err()
			case "slow":
				select {
				case <-ctx.Done():
					return "", ctx.Err()
				case <-time.After(f.slowAnswer): // the listener's answer
				}
			}
			return "path to " + to.String(), nil
		},
		release: func(route netip.AddrPort) {
			f.routes.Add(-1)
			f.mu.Lock()
			f.released = append(f.released, route)
			f.mu.Unlock()
		},
		drop: func(string) { t.Error("a path connected after the race ended") },
		avoid: func(route netip.AddrPort) int {
			if !f.avoid[route] {
				return 0
			}
			return max(f.rank[route], 1)
		},
	}
	if f.devices != nil {
		p.device = func(route netip.AddrPort) string { return f.devices[route] }
	}
	return p
}

// TestResumeRace: a resume resolves its addresses staggered and sends its
// requests one at a time, in the order the routes resolved, those through
// the failed device last; the first that connects wins and every other
// route is released; a dead address costs no more than its step; reason 6
// ends the race; when all fail the error names each address and why.
func TestResumeRace(t *testing.T) {
	ap := netip.MustParseAddrPort
	a, b, c, d := ap("10.0.0.2:1"), ap("10.1.0.2:1"), ap("10.2.0.2:1"), ap("10.3.0.2:1")
	for _, tc := range []struct {
		name      string
		behave    map[netip.AddrPort]string
		budget    time.Duration
		want      string // the path, or text the error must hold
		connected string // the connects, in order
		avoid     []netip.AddrPort
	}{
		{"first works", map[netip.AddrPort]string{a: "ok", b: "ok", c: "ok"}, time.Minute, "path to 10.0.0.2:1", "[10.0.0.2:1]", nil},
		{"dead then refused then works", map[netip.AddrPort]string{a: "dead", b: "refuse", c: "ok"}, time.Minute,
			"path to 10.2.0.2:1", "[10.1.0.2:1 10.2.0.2:1]", nil},
		{"silent connect is bounded", map[netip.AddrPort]string{a: "silent", b: "ok"}, 2 * time.Second,
			"path to 10.1.0.2:1", "[10.0.0.2:1 10.1.0.2:1]", nil},
		{"reason 6 stops", map[netip.AddrPort]string{a: "noroute", b: "forgotten", c: "ok", d: "ok"}, time.Minute,
			"the listener no longer knows the connection", "[10.1.0.2:1]", nil},
		{"all fail", map[netip.AddrPort]string{a: "noroute", b: "refuse", c: "dead", d: "silent"}, 2 * time.Second,
			"10.0.0.2:1: no route to host", "[10.1.0.2:1 10.3.0.2:1]", nil},
		{"the failed device's routes last", map[netip.AddrPort]string{a: "refuse", b: "ok", c: "ok"}, time.Minute,
			"path to 10.2.0.2:1", "[10.2.0.2:1]", []netip.AddrPort{a, b}},
		{"the failed device's routes when nothing else", map[netip.AddrPort]string{a: "refuse", b: "ok", c: "noroute", d: "refuse"}, time.Minute,
			"path to 10.1.0.2:1", "[10.3.0.2:1 10.0.0.2:1 10.1.0.2:1]", []netip.AddrPort{a, b}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakePaths{behave: tc.behave, avoid: make(map[netip.AddrPort]bool)}
			for _, x := range tc.avoid {
				f.avoid[x] = true
			}
			path, err := f.paths(t).race(context.Background(), []netip.AddrPort{a, b, c, d}, tc.budget)
			got := path
			if err != nil {
				got = err.Error()
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("race gave %q, %v; want %q", path, err, tc.want)
			}
			if s := fmtAddrs(f.connected); s != tc.connected {
				t.Errorf("connected %s, want %s", s, tc.connected)
			}
			if f.overlap > 1 {
				t.Errorf("%d resume requests in flight at once, want 1", f.overlap)
			}
			if n := f.routes.Load(); n != 0 {
				t.Errorf("%d routes neither connected nor released", n)
			}
			if tc.name == "all fail" {
				var re *resumeError
				if !errors.As(err, &re) || len(re.attempts) != 4 {
					t.Fatalf("error %v: want a resumeError with 4 attempts", err)
				}
				// The attempts in the order they failed, each with its
				// error; what follows an error (when it began) is the
				// machine's timing.
				if i, j := strings.Index(err.Error(), "10.0.0.2:1: no route to host"), strings.Index(err.Error(), "10.1.0.2:1: connection refused"); i < 0 || j < i {
					t.Errorf("the error %q does not give the two first failures in order", err)
				}
				for _, at := range re.attempts {
					if !strings.Contains(err.Error(), at.addr.String()+": ") {
						t.Errorf("the error does not name %v", at.addr)
					}
				}
				if !strings.Contains(err.Error(), "no route in 1s") || !strings.Contains(err.Error(), "no answer to the resume request in") {
					t.Errorf("the error %q does not say which step timed out", err)
				}
			}
			if tc.name == "reason 6 stops" && !errors.Is(err, errResumeForgotten) {
				t.Errorf("reason 6: %v does not match errResumeForgotten", err)
			}
		})
	}
}

// TestResumeRaceDeadline: a resume whose time runs out says so, with the
// attempts so far, and leaves no route behind.
func TestResumeRaceDeadline(t *testing.T) {
	ap := netip.MustParseAddrPort
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	f := &fakePaths{behave: map[netip.AddrPort]string{ap("10.0.0.2:1"): "noroute", ap("10.1.0.2:1"): "dead"},
		onDead: func() { cancel(context.DeadlineExceeded) }}
	_, err := f.paths(t).race(ctx, []netip.AddrPort{ap("10.0.0.2:1"), ap("10.1.0.2:1")}, time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "10.0.0.2:1: no route to host") {
		t.Errorf("race past its deadline: %v; want DeadlineExceeded and the failed attempt", err)
	}
	if n := f.routes.Load(); n != 0 {
		t.Errorf("%d routes left", n)
	}
}

// TestResumeStep: a resume request waits for half of what is left of the
// resume's time, all of it if it is the last address, at least a second
// (or half the whole if shorter), so that one dead address cannot use it
// all up.
func TestResumeStep(t *testing.T) {
	for _, c := range []struct {
		left    time.Duration
		untried int
		whole   time.Duration
		want    time.Duration
	}{
		{4 * time.Second, 4, 5 * time.Second, 2 * time.Second},
		{4 * time.Second, 2, 5 * time.Second, 2 * time.Second},
		{4 * time.Second, 1, 5 * time.Second, 4 * time.Second},
		{time.Second, 4, 5 * time.Second, time.Second},
		{100 * time.Millisecond, 4, 300 * time.Millisecond, 150 * time.Millisecond},
		{time.Second, 0, 5 * time.Second, time.Second},
	} {
		if got := resumeStep(c.left, c.untried, c.whole); got != c.want {
			t.Errorf("resumeStep(%v, %d, %v) = %v, want %v", c.left, c.untried, c.whole, got, c.want)
		}
	}
}

// TestResumeRaceWaitsForABusyListener: a request whose answer comes after
// its step is still taken while no route through another live device is
// ready (another address through the same device mostly reaches the same
// listener); a ready route through another device takes over at the step,
// one through the same device at half as long again; a route through the
// failed device only in the resume's last second, and never in place of a
// request through that device already waiting.
func TestResumeRaceWaitsForABusyListener(t *testing.T) {
	ap := netip.MustParseAddrPort
	a, b, c := ap("10.1.0.2:1"), ap("[fd01::2]:1"), ap("10.0.0.2:1")
	// A budget of 12 s gives the first request a step of about 6 s; it
	// gives way to a route through its own device at 9 s, and to one
	// through the failed device at 11 s. The slow listener answers at
	// 7.5 s: each rule is 1.5 s or more from its answer.
	const budget, slow = 12 * time.Second, 7500 * time.Millisecond
	for _, tc := range []struct {
		name      string
		behave    map[netip.AddrPort]string
		devices   map[netip.AddrPort]string
		avoid     []netip.AddrPort
		want      string
		connected string
	}{
		{"same device: the slow answer is taken", map[netip.AddrPort]string{a: "slow", b: "ok"},
			map[netip.AddrPort]string{a: "rxe1", b: "rxe1"}, nil, "path to " + a.String(), "[10.1.0.2:1]"},
		{"same device: a silent one gives way at half its step again", map[netip.AddrPort]string{a: "silent", b: "ok"},
			map[netip.AddrPort]string{a: "rxe1", b: "rxe1"}, nil, "path to " + b.String(), "[10.1.0.2:1 [fd01::2]:1]"},
		{"another device takes over at the step", map[netip.AddrPort]string{a: "slow", b: "ok"},
			map[netip.AddrPort]string{a: "rxe1", b: "rxe2"}, nil, "path to " + b.String(), "[10.1.0.2:1 [fd01::2]:1]"},
		{"the failed device waits for the last second", map[netip.AddrPort]string{a: "slow", b: "ok"},
			map[netip.AddrPort]string{a: "rxe1", b: "rxe0"}, []netip.AddrPort{b}, "path to " + a.String(), "[10.1.0.2:1]"},
		{"the failed device in the last second", map[netip.AddrPort]string{a: "silent", b: "ok"},
			map[netip.AddrPort]string{a: "rxe1", b: "rxe0"}, []netip.AddrPort{b}, "path to " + b.String(), "[10.1.0.2:1 [fd01::2]:1]"},
		{"the failed device does not replace its own request", map[netip.AddrPort]string{a: "noroute", b: "silent", c: "ok"},
			map[netip.AddrPort]string{b: "rxe0", c: "rxe0"}, []netip.AddrPort{b, c}, "no path", "[[fd01::2]:1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakePaths{behave: tc.behave, devices: tc.devices, slowAnswer: slow, avoid: make(map[netip.AddrPort]bool)}
			for _, x := range tc.avoid {
				f.avoid[x] = true
			}
			addrs := []netip.AddrPort{a, b}
			if _, ok := tc.behave[c]; ok {
				addrs = append(addrs, c)
			}
			path, err := f.paths(t).race(context.Background(), addrs, budget)
			got := path
			if err != nil {
				got = "no path"
			}
			if got != tc.want {
				t.Errorf("race gave %q, %v; want %q", path, err, tc.want)
			}
			if s := fmtAddrs(f.connected); s != tc.connected {
				t.Errorf("connected %s, want %s", s, tc.connected)
			}
			if n := f.routes.Load(); n != 0 {
				t.Errorf("%d routes neither connected nor released", n)
			}
		})
	}
}

// TestResumeErrorSaysWhenAndWhere: each attempt in a failed resume's error
// names the device its request left through and when it went out, or when
// its route began to resolve, so that a slow listener reads apart from a
// dead wire.
func TestResumeErrorSaysWhenAndWhere(t *testing.T) {
	ap := netip.MustParseAddrPort
	e := &resumeError{cause: context.DeadlineExceeded, attempts: []resumeAttemptError{
		{addr: ap("[fd80::2]:7473"), err: errors.New("no route"), at: 250 * time.Millisecond},
		{addr: ap("10.81.0.2:7473"), err: errors.New("no answer"), dev: "rxe1", sent: true, at: 12 * time.Millisecond},
		{addr: ap("10.80.0.2:7473"), err: errors.New("refused"), sent: true},
	}}
	want := "rnet: resume failed: context deadline exceeded; tried " +
		"[fd80::2]:7473: no route (resolving from 250ms into the resume); " +
		"10.81.0.2:7473: no answer (via rxe1, set up from 12ms into the resume); " +
		"10.80.0.2:7473: refused"
	if got := e.Error(); got != want {
		t.Errorf("error\n%s\nwant\n%s", got, want)
	}
	e.untried = []string{"[fd81::2]:7473 (held back: through rxe1, whose path failed)", "10.81.0.2:7473 (still resolving)"}
	want += "; not tried: [fd81::2]:7473 (held back: through rxe1, whose path failed), 10.81.0.2:7473 (still resolving)"
	if got := e.Error(); got != want {
		t.Errorf("error\n%s\nwant\n%s", got, want)
	}
}

// TestFailedDevices: a resume tries last the devices whose paths failed in
// use within the memory, not the device of a new path that failed before
// it took over, and forgets a failure once the memory has passed.
func TestFailedDevices(t *testing.T) {
	t0 := time.Unix(1000, 0)
	memory := failedDeviceMemory(5 * time.Second)
	if memory != 20*time.Second {
		t.Fatalf("memory %v, want 4 resume times", memory)
	}
	var f failedDevices
	f = f.note("", t0) // a TCP path has no device
	f = f.note("rxe0", t0)
	if got := f.recent(t0.Add(time.Second), memory); got["rxe0"] != 1 || len(got) != 1 {
		t.Fatalf("after rxe0 failed: %v", got)
	}
	f = f.note("rxe1", t0.Add(10*time.Second))
	if got := f.recent(t0.Add(15*time.Second), memory); got["rxe1"] != 1 || got["rxe0"] != 2 {
		t.Fatalf("after both failed, rxe1 last: %v, want rxe1 first (it worked after rxe0 had failed)", got)
	}
	if got := f.recent(t0.Add(25*time.Second), memory); got["rxe0"] != 0 || got["rxe1"] != 1 {
		t.Fatalf("rxe0's failure is %v old, rxe1's 15s: %v", 25*time.Second, got)
	}
	if _, ok := f["rxe0"]; ok {
		t.Errorf("rxe0 is remembered past the memory")
	}
}

// TestResumeRaceHeldByRank: when every route leaves through a device whose
// path failed, the route of the device that failed last goes first, though
// it resolved after the other.
func TestResumeRaceHeldByRank(t *testing.T) {
	ap := netip.MustParseAddrPort
	a, b := ap("10.0.0.2:1"), ap("10.1.0.2:1")
	f := &fakePaths{behave: map[netip.AddrPort]string{a: "refuse", b: "ok"},
		avoid: map[netip.AddrPort]bool{a: true, b: true}, rank: map[netip.AddrPort]int{a: 2, b: 1}}
	path, err := f.paths(t).race(context.Background(), []netip.AddrPort{a, b}, time.Minute)
	if err != nil || path != "path to 10.1.0.2:1" {
		t.Fatalf("race gave %q, %v; want the path to 10.1.0.2:1", path, err)
	}
	if s := fmtAddrs(f.connected); s != "[10.1.0.2:1]" {
		t.Errorf("connected %s, want only the route through the device that failed last", s)
	}
	if n := f.routes.Load(); n != 0 {
		t.Errorf("%d routes neither connected nor released", n)
	}
}

// TestResumeRaceHeldGivesWay: a request through the device that failed
// last, unanswered for its step, gives way to a route through a device
// that failed before it.
func TestResumeRaceHeldGivesWay(t *testing.T) {
	ap := netip.MustParseAddrPort
	a, b := ap("10.0.0.2:1"), ap("10.1.0.2:1")
	f := &fakePaths{behave: map[netip.AddrPort]string{a: "silent", b: "ok"},
		avoid: map[netip.AddrPort]bool{a: true, b: true}, rank: map[netip.AddrPort]int{a: 1, b: 2},
		devices: map[netip.AddrPort]string{a: "rxe1", b: "rxe0"}}
	path, err := f.paths(t).race(context.Background(), []netip.AddrPort{a, b}, 3*time.Second)
	if err != nil || path != "path to 10.1.0.2:1" {
		t.Fatalf("race gave %q, %v; want the path to 10.1.0.2:1", path, err)
	}
	if s := fmtAddrs(f.connected); s != "[10.0.0.2:1 10.1.0.2:1]" {
		t.Errorf("connected %s, want the device that failed last first, then the other", s)
	}
	if n := f.routes.Load(); n != 0 {
		t.Errorf("%d routes neither connected nor released", n)
	}
}

// TestResumeRaceHeldDoesNotWaitForADeadResolve: when every route that
// resolved leaves through a failed device, a resolution that hangs (a dead
// wire's IPv6 address) holds their requests back only heldGrace, not until
// its bound, half the resume's time.
func TestResumeRaceHeldDoesNotWaitForADeadResolve(t *testing.T) {
	ap := netip.MustParseAddrPort
	dead, held := ap("[fd00::2]:1"), ap("10.1.0.2:1")
	f := &fakePaths{behave: map[netip.AddrPort]string{dead: "dead", held: "ok"},
		avoid: map[netip.AddrPort]bool{held: true}}
	path, err := f.paths(t).race(context.Background(), []netip.AddrPort{dead, held}, time.Minute)
	if err != nil || path != "path to 10.1.0.2:1" {
		t.Fatalf("race gave %q, %v; want the path to 10.1.0.2:1", path, err)
	}
	f.mu.Lock()
	early := fmtAddrs(f.connectedEarly)
	f.mu.Unlock()
	if early != "[10.1.0.2:1]" {
		t.Errorf("connected before the dead address's resolution ended: %s; want the held route", early)
	}
	if n := f.routes.Load(); n != 0 {
		t.Errorf("%d routes neither connected nor released", n)
	}
}

// A dialer's new path waits for the listener's exchange half of what is
// left of the resume, so that a second request has the other half, and
// all of it once that half would be shorter than a request's least step.
func TestResumeExchangeWait(t *testing.T) {
	for _, c := range []struct{ left, want time.Duration }{
		{5 * time.Second, 2500 * time.Millisecond},
		{2 * minResumeStep, minResumeStep},
		{2*minResumeStep - time.Millisecond, 0},
		{0, 0},
	} {
		if got := resumeExchangeWait(c.left); got != c.want {
			t.Errorf("resumeExchangeWait(%v) = %v, want %v", c.left, got, c.want)
		}
	}
}
