package rnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// The dialer's side of resuming a connection (docs/design.md, "Resuming"):
// which addresses it tries, how it races them, and what it says when none
// works. The connection manager's part is in resume_dial_linux.go.

// resumeStagger is how long a resume waits for one address's route before
// it starts resolving the next, as happy eyeballs staggers its attempts
// (RFC 8305's connection attempt delay); a failure starts the next at once.
const resumeStagger = 250 * time.Millisecond

// resumeResolveTimeout bounds the resolving of one address's route, so
// that one dead address cannot take the whole of a resume's time: half of
// it. Routes resolve side by side, so this costs the others nothing.
func resumeResolveTimeout(resumeTimeout time.Duration) time.Duration {
	return max(resumeTimeout/2, minResumeTimeout/2)
}

// heldGrace is how long, once every address has begun resolving, a route
// through a failed device waits for the resolutions still under way before
// its request goes: when every device has failed, the neighbour cache of
// a dead wire's IPv6 address answers only at the resolve bound, half the
// resume's time, and a route through another device after that long is
// less likely than the held one to help.
const heldGrace = time.Second

// minResumeStep is the least a resume request waits for its answer, unless
// the resume's whole time is shorter.
const minResumeStep = time.Second

// resumeStep is how long a resume request waits for its answer before the
// race may give up on it for a route through another device: half of what
// is left of the resume's time while other addresses remain untried
// (untried counts this one), all of it for the last, so that one dead
// address cannot use it all up; at least minResumeStep (or half the whole,
// if shorter). Not less than half: a listener under a hundred resumes at
// once has been seen to take 2 s to answer (docs/performance.md).
func resumeStep(left time.Duration, untried int, whole time.Duration) time.Duration {
	return max(left/time.Duration(min(max(untried, 1), 2)), min(minResumeStep, whole/2))
}

// resumeExchangeWait is how long a dialer's new path waits for the
// listener's exchange, with left of the resume's time to go: half of it,
// so that a second request has the other half; all of it (0) when that
// half would be less than minResumeStep. The listener sends its exchange
// once our RTU has come; a lost RTU is sent again only when the listener's
// connection manager resends its reply, some 4 s later, past most resumes'
// time, while a new request replaces the stuck handshake at once.
func resumeExchangeWait(left time.Duration) time.Duration {
	if left < 2*minResumeStep {
		return 0
	}
	return left / 2
}

// failedDevices are the local devices whose paths failed in use, and when
// each last did. A resume tries routes through them last (resumePaths'
// avoid). A new path that failed before it took over does not count: the
// listener dropped it or its exchange came late, over a wire that worked,
// and the device of the path that failed in use stays the one to avoid.
type failedDevices map[string]time.Time

// note records that the path in use through dev failed at now ("" is no
// device: a TCP path, or none known).
func (f failedDevices) note(dev string, now time.Time) failedDevices {
	if dev == "" {
		return f
	}
	if f == nil {
		f = make(failedDevices)
	}
	f[dev] = now
	return f
}

// recent ranks the devices that failed within memory of now, 1 for the
// one that failed last, and forgets the others. A resume tries the routes
// through them in that order: the device that failed last is the one
// last known to work, after the others had failed.
func (f failedDevices) recent(now time.Time, memory time.Duration) map[string]int {
	devs := make([]string, 0, len(f))
	for dev, at := range f {
		if now.Sub(at) < memory {
			devs = append(devs, dev)
		} else {
			delete(f, dev)
		}
	}
	slices.SortFunc(devs, func(a, b string) int {
		if c := f[b].Compare(f[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	out := make(map[string]int, len(devs))
	for i, dev := range devs {
		out[dev] = i + 1
	}
	return out
}

// failedDeviceMemory is how long a device whose path failed is tried last:
// the window in which the stream counts a connection's resumes against
// MaxResumes, four resumes' time, so that a device whose link came back is
// tried first again soon after.
func failedDeviceMemory(resumeTimeout time.Duration) time.Duration {
	if resumeTimeout <= 0 {
		resumeTimeout = defaultResumeTimeout
	}
	return 4 * resumeTimeout
}

// resumeCandidates are the addresses a resume tries, in order: the
// listener's other addresses from its latest reply, which it lists other
// devices first, then the address that reply came from (which it leaves
// out), then the address dialled, each once.
func resumeCandidates(replied []netip.AddrPort, reached, dialled netip.AddrPort) []netip.AddrPort {
	out := make([]netip.AddrPort, 0, len(replied)+2)
	for _, a := range append(replied[:len(replied):len(replied)], reached, dialled) {
		a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
		if a.IsValid() && !contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

func contains(addrs []netip.AddrPort, a netip.AddrPort) bool {
	for _, b := range addrs {
		if a == b {
			return true
		}
	}
	return false
}

// errResumeForgotten marks an attempt refused with reject reason 6: the
// listener no longer knows the connection (its lifetime ran out, or it
// ended there), so no other address can resume it either.
var errResumeForgotten = errors.New("the listener no longer knows the connection (reject reason 6: its token is unknown or expired there)")

// resumeAttemptError is why a resume's attempt at one address failed.
type resumeAttemptError struct {
	addr netip.AddrPort
	err  error
	// What a reader needs to tell a slow listener from a dead wire: the
	// local device the request left through ("" if it never resolved),
	// and when, since the resume began, its path began to be set up (or
	// the route began to resolve, if it never did): the request goes out
	// once the queue pair is made.
	dev  string
	sent bool
	at   time.Duration
}

// resumeError is a resume that found no path: every address tried, and why
// each failed, or that the listener refused it for good.
type resumeError struct {
	attempts []resumeAttemptError
	// cause ends the resume before every address failed: the listener's
	// refusal (errResumeForgotten) or the resume's time running out.
	cause error
	// untried are the addresses the resume had when it ended and never
	// sent a request to, each with where it stood ("still resolving",
	// "held back: through rxe0, whose path failed").
	untried []string
}

func (e *resumeError) Error() string {
	var b strings.Builder
	b.WriteString("rnet: resume failed")
	if e.cause != nil {
		b.WriteString(": ")
		b.WriteString(e.cause.Error())
	}
	if len(e.attempts) == 0 {
		b.WriteString(": no address tried")
		e.writeUntried(&b)
		return b.String()
	}
	b.WriteString("; tried ")
	for i, a := range e.attempts {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(a.addr.String())
		b.WriteString(": ")
		b.WriteString(a.err.Error())
		at := a.at.Round(time.Millisecond)
		switch {
		case a.sent && a.dev != "":
			fmt.Fprintf(&b, " (via %s, set up from %v into the resume)", a.dev, at)
		case a.sent && at > 0:
			fmt.Fprintf(&b, " (set up from %v into the resume)", at)
		case !a.sent && at > 0:
			fmt.Fprintf(&b, " (resolving from %v into the resume)", at)
		}
	}
	e.writeUntried(&b)
	return b.String()
}

func (e *resumeError) writeUntried(b *strings.Builder) {
	if len(e.untried) > 0 {
		b.WriteString("; not tried: ")
		b.WriteString(strings.Join(e.untried, ", "))
	}
}

func (e *resumeError) Unwrap() []error {
	errs := make([]error, 0, len(e.attempts)+1)
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	for _, a := range e.attempts {
		errs = append(errs, a.err)
	}
	return errs
}

// resumePaths is how a resume reaches the listener, one address at a time:
// resolve finds a route to an address (a connection-manager id bound to a
// local device), connect sends the resume request on it and returns the
// established path (releasing the route itself if it fails), release
// frees a route never connected, and drop closes a path that connected
// once the resume had ended otherwise. avoid, if set, ranks a route that
// leaves through a local device whose path failed (1 goes first; 0: the
// route is not held back); device, if set, names the local device a
// route leaves through.
type resumePaths[R, P any] struct {
	resolve func(ctx context.Context, to netip.AddrPort) (R, error)
	connect func(ctx context.Context, to netip.AddrPort, route R) (P, error)
	release func(R)
	drop    func(P)
	avoid   func(R) int
	device  func(R) string
}

// race resumes over the first of addrs that works, within budget. The
// routes are resolved staggered, resumeStagger apart, or the next at once
// when one fails or leaves through the failed device; the resume requests
// go out one at a time, on each route in the order the routes resolved,
// those through a failed device (avoid) last, in avoid's rank, once no other address can
// give a route (or heldGrace after the last began resolving): its neighbour
// cache answers at once for the addresses of a wire that is now dead. One at a time because a listener takes a second
// request with the same token as replacing the first (resume.Table.Begin):
// two in flight could leave the dialer on the path the listener dropped,
// holding a token the listener forgot. Routes go on resolving while a
// request waits. Each resolve is bounded by half the budget. A request
// waits resumeStep, then gives way to a route through another live device
// as soon as one is ready (to any ready route after half as long again);
// with none, it waits for its answer until minResumeStep before the end if
// a route through the failed device would go next, else until the end:
// another address through the same device mostly reaches the same
// listener, and a listener busy with many resumes is slow, not gone; a
// second request would replace the first there and start it over. A
// connect that fails with errResumeForgotten ends the race. Every route
// not connected is released, and every goroutine has ended, before race
// returns.
func (p resumePaths[R, P]) race(ctx context.Context, addrs []netip.AddrPort, budget time.Duration) (P, error) {
	var zero P
	began := time.Now()
	deadline := began.Add(budget)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	resolveBound := resumeResolveTimeout(budget)
	type resolved struct {
		i     int
		route R
		err   error
		// Read off the route as it resolved, before a connect owns it:
		// its local device (if known), and whether that is the failed one.
		dev    string
		failed int
	}
	type connected struct {
		i    int
		path P
		err  error
	}
	results := make(chan resolved, len(addrs))
	connects := make(chan connected, 1)
	var wg sync.WaitGroup
	// Routes resolved and not yet tried: through another device (ready),
	// or through the failed one (held).
	var ready, held []resolved
	connecting := false
	var current resolved // the route of the request in flight
	var (
		sent       time.Time          // when it went out
		step       time.Duration      // its resumeStep
		stepOver   bool               // it has waited that
		giveUp     context.CancelFunc // ends it
		unanswered string             // the device of the last request given up on
	)
	stepTimer := time.NewTimer(time.Hour)
	stepTimer.Stop()
	defer stepTimer.Stop()
	defer func() {
		cancel()
		if connecting {
			// A connect's failure releases its route itself; a path it
			// made as the race ended is closed here.
			if c := <-connects; c.err == nil {
				p.drop(c.path)
			}
		}
		wg.Wait()
		close(results)
		for r := range results {
			if r.err == nil {
				ready = append(ready, r)
			}
		}
		for _, r := range append(ready, held...) {
			p.release(r.route)
		}
	}()
	resolving := make([]time.Duration, len(addrs))
	var lastStart time.Time // when the last address began resolving
	resolve := func(i int) {
		lastStart = time.Now()
		resolving[i] = time.Since(began)
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, acancel := context.WithTimeout(ctx, resolveBound)
			route, err := p.resolve(actx, addrs[i])
			if err != nil && ctx.Err() == nil && actx.Err() != nil {
				err = fmt.Errorf("no route in %v: %w", resolveBound, err)
			}
			acancel()
			results <- resolved{i: i, route: route, err: err}
		}()
	}
	e := &resumeError{}
	connect := func(r resolved) {
		connecting, current, stepOver, sent = true, r, false, time.Now()
		step = resumeStep(time.Until(deadline), len(addrs)-len(e.attempts), budget)
		stepTimer.Reset(step)
		cctx, ccancel := context.WithCancel(ctx)
		giveUp = ccancel
		go func() {
			path, err := p.connect(cctx, addrs[r.i], r.route)
			if err != nil && ctx.Err() == nil && cctx.Err() != nil {
				err = fmt.Errorf("no answer to the resume request in %v: %w", time.Since(sent).Round(time.Millisecond), err)
			}
			ccancel()
			connects <- connected{r.i, path, err}
		}()
	}
	next, pending := 0, 0
	// heldMayGo: no route is ready, and the held routes have waited for
	// every address's resolution to end, or heldGrace once all began.
	heldMayGo := func() bool {
		return len(held) > 0 && len(ready) == 0 && next == len(addrs) &&
			(pending == 0 || time.Since(lastStart) >= heldGrace)
	}
	// ended lists, in e, the addresses never sent a request and why.
	ended := func() *resumeError {
		done := make(map[int]bool, len(e.attempts))
		for _, a := range e.attempts {
			for i, x := range addrs {
				if x == a.addr {
					done[i] = true
				}
			}
		}
		for _, r := range ready {
			done[r.i] = true
			e.untried = append(e.untried, fmt.Sprintf("%v (its route was ready)", addrs[r.i]))
		}
		for _, r := range held {
			done[r.i] = true
			dev := r.dev
			if dev == "" {
				dev = "a device"
			}
			e.untried = append(e.untried, fmt.Sprintf("%v (held back: through %s, whose path failed)", addrs[r.i], dev))
		}
		if connecting {
			done[current.i] = true
		}
		for i, a := range addrs {
			if !done[i] {
				state := "still resolving"
				if i >= next {
					state = "not yet resolving"
				}
				e.untried = append(e.untried, fmt.Sprintf("%v (%s)", a, state))
			}
		}
		return e
	}
	// reconsider gives up on a request that has waited its step, for a
	// ready route through another device (any ready route once it has
	// waited half as long again: one device may reach several of the
	// listener's ports, one of them dead), or, once only minResumeStep
	// is left, for a route through the failed device that would go next;
	// else it sets the step's timer for when that may change.
	reconsider := func() {
		if !connecting || !stepOver {
			return
		}
		now := time.Now()
		overdue := now.Sub(sent) >= step*3/2
		for _, r := range ready {
			if p.device == nil || overdue || r.dev != current.dev {
				unanswered = current.dev
				giveUp()
				return
			}
		}
		lastChance := deadline.Add(-minResumeStep)
		heldNext := heldMayGo()
		if heldNext && current.failed > 0 && p.device != nil && held[0].dev != current.dev {
			// A request through one failed device gives way to a held
			// route through another, as it would to a ready one: the
			// device that failed last may be dead still, an older one
			// back. Never to its own device's: that second request
			// would replace the first at the listener.
			unanswered = current.dev
			giveUp()
			return
		}
		heldNext = heldNext && current.failed == 0
		if heldNext && !now.Before(lastChance) {
			unanswered = current.dev
			giveUp()
			return
		}
		var at time.Time
		if !overdue {
			at = sent.Add(step * 3 / 2)
		}
		if heldNext && (at.IsZero() || lastChance.Before(at)) {
			at = lastChance
		}
		if !at.IsZero() {
			stepTimer.Reset(time.Until(at))
		}
	}
	// nextReady takes the ready route to try next: the first through a
	// device other than the one whose request went unanswered, if any.
	nextReady := func() resolved {
		k := 0
		for i, r := range ready {
			if unanswered == "" || r.dev != unanswered {
				k = i
				break
			}
		}
		r := ready[k]
		ready = append(ready[:k], ready[k+1:]...)
		return r
	}
	fail := func(i int, err error) {
		e.attempts = append(e.attempts, resumeAttemptError{addr: addrs[i], err: err, at: resolving[i]})
	}
	failSent := func(r resolved, err error) {
		e.attempts = append(e.attempts, resumeAttemptError{addr: addrs[r.i], err: err, dev: r.dev, sent: true, at: sent.Sub(began)})
	}
	timedOut := func() error {
		return fmt.Errorf("no answer to the resume request in the %v it had", time.Since(sent).Round(time.Millisecond))
	}
	stagger := time.NewTimer(0)
	defer stagger.Stop()
	for next < len(addrs) || pending > 0 || len(ready) > 0 || len(held) > 0 || connecting {
		if !connecting {
			switch {
			case len(ready) > 0:
				connect(nextReady())
			case heldMayGo():
				connect(held[0])
				held = held[1:]
			}
		}
		select {
		case <-stagger.C:
			if next < len(addrs) {
				resolve(next)
				next++
				pending++
				if next < len(addrs) {
					stagger.Reset(resumeStagger)
				} else {
					stagger.Reset(heldGrace) // heldMayGo may change then
				}
			} else {
				// heldGrace has passed: a request in flight may now give
				// way to a held route.
				reconsider()
			}
		case r := <-results:
			pending--
			if r.err == nil && p.device != nil {
				r.dev = p.device(r.route)
			}
			switch {
			case r.err != nil:
				fail(r.i, r.err)
			case p.avoid != nil && p.avoid(r.route) > 0:
				r.failed = p.avoid(r.route)
				k := len(held)
				for k > 0 && held[k-1].failed > r.failed {
					k--
				}
				held = slices.Insert(held, k, r)
			default:
				ready = append(ready, r)
				reconsider()
				continue
			}
			reconsider()
			if next < len(addrs) {
				stagger.Reset(0) // the next at once
			}
		case <-stepTimer.C:
			stepOver = true
			reconsider()
		case c := <-connects:
			connecting = false
			stepTimer.Stop()
			if c.err == nil {
				return c.path, nil
			}
			if ctx.Err() != nil {
				// The request failed as the resume's time ran out.
				failSent(current, timedOut())
				e.cause = context.Cause(ctx)
				return zero, ended()
			}
			failSent(current, c.err)
			if errors.Is(c.err, errResumeForgotten) {
				e.cause = errResumeForgotten
				return zero, ended()
			}
		case <-ctx.Done():
			if connecting {
				// The last address's request takes what is left of the
				// time; the error names it too.
				failSent(current, timedOut())
			}
			e.cause = context.Cause(ctx)
			return zero, ended()
		}
	}
	if ctx.Err() != nil {
		// The last failure came with the resume's end, which caused it.
		e.cause = context.Cause(ctx)
	}
	return zero, ended()
}
