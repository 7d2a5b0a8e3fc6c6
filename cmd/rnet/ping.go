package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/rnet-dev/rnet/internal/lockcount"
	"github.com/rnet-dev/rnet/internal/perfjson"
	"github.com/rnet-dev/rnet/internal/stats"
	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/rnet"
)

type pingOpts struct {
	addr          string
	device        string // -d: bind to this device's address
	from          string
	size          int
	count         int
	warmup        int
	interval      time.Duration
	progressEvery time.Duration // between progress lines
	tcp           bool
	fallback      bool
	json          bool
	quiet         bool
	rdma          rdmaFlags
}

var pingCommand = command{
	name:     "ping",
	synopsis: "rnet ping host[:port] [-c COUNT] [flags]",
	summary:  "round trips to an rnet perf -s server",
	about: `rnet ping sends -c messages of -size bytes to an rnet perf -s server, each echoed
back, and reports the round trips' percentiles (after -warmup more), with a progress
line per -progress interval on stderr.
`,
	flags: func() *flag.FlagSet { return pingFlags(&pingOpts{}) },
	run: func(args []string, stdout, stderr io.Writer, where *target) error {
		o, err := parsePing(args)
		if err != nil {
			return err
		}
		where.addr, where.transport = o.addr, netName(o.tcp)
		return runPing(o, stdout, stderr)
	},
}

// pingFlags defines ping's flags on a new FlagSet that fills o, with
// their defaults.
func pingFlags(o *pingOpts) *flag.FlagSet {
	fs := newFlagSet("ping")
	fs.IntVar(&o.count, "c", 1000, "round trips to measure (as ping -c)")
	fs.StringVar(&o.device, "d", "", "the RDMA `device` to use, by name (rxe0, mlx5_0): bind to its address")
	fs.StringVar(&o.from, "from", "", "local `IP` to connect from (picks the RDMA device)")
	o.size = 64
	fs.Var(byteSize[int]{&o.size}, "size", "`bytes` per message (each way), such as 64 or 4K")
	fs.IntVar(&o.warmup, "warmup", 100, "round trips before measuring")
	fs.DurationVar(&o.interval, "i", 0, "pause between round trips (0: back to back)")
	fs.DurationVar(&o.progressEvery, "progress", time.Second, "interval of the progress lines (on stderr; none with -q or --json)")
	fs.BoolVar(&o.tcp, "tcp", false, "use TCP instead of RDMA (the baseline)")
	fs.BoolVar(&o.fallback, "fallback", false, "fall back to TCP where RDMA cannot be used")
	fs.BoolVar(&o.json, "json", false, "print the result as JSON (errors too, as {\"error\": ...})")
	fs.BoolVar(&o.quiet, "q", false, "no progress lines")
	o.rdma.register(fs)
	return fs
}

func parsePing(args []string) (pingOpts, error) {
	o := pingOpts{}
	pos, err := parseInterleaved(pingFlags(&o), args)
	if name, ok := undefinedFlag(err); ok && name == "n" {
		// rnet was never released with ping -n, so it is gone, not deprecated.
		return o, usageErrorf("-n is perf's byte count; ping counts round trips with -c COUNT, as ping(8) does")
	}
	if err != nil {
		return o, err
	}
	switch {
	case len(pos) != 1:
		return o, usageErrorf("want exactly one host[:port], got %q", pos)
	case o.device != "" && o.from != "":
		return o, usageError{deviceAndFrom}
	case o.size <= 0 || o.size > maxSize:
		return o, usageErrorf("-size must be in 1..%d (64M)", maxSize)
	case o.count <= 0 || o.warmup < 0 || o.interval < 0 || o.progressEvery <= 0:
		return o, usageErrorf("-c and -progress must be positive, -warmup and -i not negative")
	}
	if err := o.rdma.check(); err != nil {
		return o, usageError{err.Error()}
	}
	if o.addr, err = hostPort(pos[0]); err != nil {
		return o, usageError{err.Error()}
	}
	return o, nil
}

func runPing(o pingOpts, stdout, stderr io.Writer) error {
	c, err := dial(o.tcp, o.fallback, o.addr, o.from, o.device, o.rdma.config())
	if err != nil {
		return err
	}
	defer c.Close()
	return pingConn(c, o, stdout, stderr)
}

// pingConn measures o's round trips over c, connected to an rnet perf -s
// server, and prints the summary.
func pingConn(c net.Conn, o pingOpts, stdout, stderr io.Writer) error {
	if _, err := c.Write(hello{mode: modePing, size: uint32(o.size)}.encode()); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	buf := make([]byte, o.size)
	rtt := make([]time.Duration, 0, o.count)
	rc, _ := c.(*rnet.Conn)
	var cgo0, locks0 uint64
	var st0 rnet.Stats
	var prog *pingProgress
	if !o.quiet && !o.json {
		prog = &pingProgress{w: stderr, tty: isTerminal(stderr), every: o.progressEvery}
		defer prog.end() // on an error, before its message
	}
	for i := 0; i < o.warmup+o.count; i++ {
		if i == o.warmup {
			cgo0, locks0 = verbs.CgoCalls(), lockcount.Taken()
			if rc != nil {
				st0 = rc.Stats()
			}
			if prog != nil {
				prog.start(time.Now())
			}
		}
		t0 := time.Now()
		if _, err := c.Write(buf); err != nil {
			return fmt.Errorf("write: %w%s", err, refusedHint(i))
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return fmt.Errorf("read: %w%s", err, refusedHint(i))
		}
		if i >= o.warmup {
			now := time.Now()
			rtt = append(rtt, now.Sub(t0))
			if prog != nil {
				prog.tick(now, rtt)
			}
		}
		if o.interval > 0 {
			time.Sleep(o.interval)
		}
	}
	cgo, locks := verbs.CgoCalls()-cgo0, lockcount.Taken()-locks0
	if prog != nil {
		prog.end()
	}
	r := summarize(rtt)
	r.Server, r.Local, r.Size = c.RemoteAddr().String(), c.LocalAddr().String(), o.size
	r.Transport, r.Fallback = transportOf(c, o.tcp)
	if rc != nil && len(rtt) > 0 {
		st := rc.Stats()
		trips := float64(len(rtt))
		r.CgoPerTrip = ptr(float64(cgo) / trips)
		r.SpinsPerTrip = ptr(float64(st.Spins-st0.Spins) / trips)
		r.ParksPerTrip = ptr(float64(st.Parks-st0.Parks) / trips)
	}
	if lockcount.Enabled && len(rtt) > 0 {
		r.LocksPerTrip = ptr(float64(locks) / float64(len(rtt)))
	}
	if o.json {
		return json.NewEncoder(stdout).Encode(r)
	}
	line := fmt.Sprintf("%s %s -> %s: %d round trips of %d B: min %.1f  p50 %.1f  p90 %.1f  p99 %.1f  max %.1f  mean %.1f µs",
		withFallback(r.Transport, r.Fallback), r.Local, r.Server, r.Count, r.Size, r.MinUs, r.P50Us, r.P90Us, r.P99Us, r.MaxUs, r.MeanUs)
	var perTrip []string
	if r.CgoPerTrip != nil {
		perTrip = append(perTrip, fmt.Sprintf("%.2f cgo calls, %.2f spins, %.3f parks", *r.CgoPerTrip, *r.SpinsPerTrip, *r.ParksPerTrip))
	}
	if r.LocksPerTrip != nil {
		perTrip = append(perTrip, fmt.Sprintf("%.2f locks", *r.LocksPerTrip))
	}
	if len(perTrip) > 0 {
		line += "; per round trip: " + strings.Join(perTrip, ", ")
	}
	_, err := fmt.Fprintln(stdout, line)
	return err
}

func summarize(rtt []time.Duration) perfjson.PingResult {
	r := perfjson.PingResult{Test: "ping", Count: len(rtt)}
	if len(rtt) == 0 {
		return r
	}
	var sum time.Duration
	for _, d := range rtt {
		sum += d
	}
	s := slices.Clone(rtt)
	slices.Sort(s)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	pct := func(p float64) float64 { return us(stats.Percentile(s, p)) }
	r.MinUs, r.MaxUs = us(s[0]), us(s[len(s)-1])
	r.P50Us, r.P90Us, r.P99Us = pct(50), pct(90), pct(99)
	r.MeanUs = us(sum) / float64(len(s))
	return r
}

func ptr[T any](v T) *T { return &v }

// pingProgress prints a line per interval while ping measures: the round
// trips so far and the last interval's median and mean. It looks at the
// clock after each round trip, so a round trip that hangs holds it up too.
type pingProgress struct {
	w          io.Writer
	tty        bool
	every      time.Duration
	begin      time.Time
	next       time.Time
	from       int // the first round trip of the interval
	lastPrint  time.Time
	printedAny bool
}

func (p *pingProgress) start(now time.Time) {
	p.begin, p.lastPrint, p.next = now, now, now.Add(p.every)
}

func (p *pingProgress) tick(now time.Time, rtt []time.Duration) {
	if now.Before(p.next) {
		return
	}
	r := summarize(rtt[p.from:])
	line := fmt.Sprintf("[%6.1fs] %8d round trips  %8.1f µs p50  %8.1f µs mean  %8.1f µs max (last %.1f s)",
		now.Sub(p.begin).Seconds(), len(rtt), r.P50Us, r.MeanUs, r.MaxUs, now.Sub(p.lastPrint).Seconds())
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K"+line)
	} else {
		fmt.Fprintln(p.w, line)
	}
	p.printedAny = true
	p.from, p.lastPrint, p.next = len(rtt), now, now.Add(p.every)
}

// end clears a terminal's progress line before the summary (once).
func (p *pingProgress) end() {
	if p.tty && p.printedAny {
		fmt.Fprint(p.w, "\r\033[K")
	}
	p.printedAny = false
}

// refusedHint explains a failure of the first round trip: a server that
// refuses a test closes the connection without an answer, and says why in
// its own output.
func refusedHint(trip int) string {
	if trip > 0 {
		return ""
	}
	return " (before the first answer: the server may have refused the test; its output says why)"
}
