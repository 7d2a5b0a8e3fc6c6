package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rnet-dev/rnet/rnet"
)

// rnet stat reads the "rnet" and "rnet_sockets" expvar variables a process
// publishes (its rnet.Metrics and rnet.Sockets) from its /debug/vars and
// prints them as tables, as ss does a host's sockets.

type statOpts struct {
	url  string
	json bool
}

var statCommand = command{
	name:     "stat",
	synopsis: "rnet stat [--json] URL",
	summary:  "a process's rnet metrics, from its /debug/vars (host:port or a URL)",
	about: `rnet stat reads the "rnet" and "rnet_sockets" variables a process publishes through
expvar (its rnet.Metrics and rnet.Sockets) from its /debug/vars and prints them as tables, as
ss does a host's sockets: each listener with its accepts, backlog and refusals; each open
connection with its transport, device, addresses, queue pair number (as rdma resource show
qp lists it), bytes read and written and ring bytes (the process lists the first 1000 by
address and counts the others); then the open connections by transport and device, the
other gauges (pinned bytes among them) and the counters. rnet perf -s -metrics ADDR serves
them.
`,
	flags: func() *flag.FlagSet { return statFlags(&statOpts{}) },
	run: func(args []string, stdout, stderr io.Writer, where *target) error {
		o, err := parseStat(args)
		if err != nil {
			return err
		}
		where.addr = o.url
		return runStat(o, stdout)
	},
}

func statFlags(o *statOpts) *flag.FlagSet {
	fs := newFlagSet("stat")
	fs.BoolVar(&o.json, "json", false, "print the metrics as the process publishes them, as JSON (the sockets under \"sockets\")")
	return fs
}

func parseStat(args []string) (statOpts, error) {
	var o statOpts
	pos, err := parseInterleaved(statFlags(&o), args)
	if err != nil {
		return o, err
	}
	if len(pos) != 1 {
		return o, usageErrorf("stat takes one URL, got %q", pos)
	}
	o.url = pos[0]
	return o, nil
}

// varsURL is where a process at target publishes its expvar variables:
// target itself if it names a path, else its /debug/vars.
func varsURL(target string) (string, error) {
	if !strings.Contains(target, "://") {
		target = "http://" + target
	}
	u, err := url.Parse(target)
	if err != nil {
		return "", err
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/debug/vars"
	}
	return u.String(), nil
}

func runStat(o statOpts, stdout io.Writer) error {
	target, err := varsURL(o.url)
	if err != nil {
		return err
	}
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(target)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", target, resp.Status)
	}
	var vars map[string]json.RawMessage
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&vars); err != nil {
		return fmt.Errorf("GET %s: not expvar's JSON: %v", target, err)
	}
	raw, ok := vars["rnet"]
	if !ok {
		return fmt.Errorf("%s has no \"rnet\" variable: the process has opened no rnet connection or listener yet, or is not an rnet program", target)
	}
	var st published
	if err := json.Unmarshal(raw, &st.Metrics); err != nil {
		return fmt.Errorf("%s: the \"rnet\" variable: %v", target, err)
	}
	// A process built with an rnet that publishes no sockets has the
	// metrics alone.
	if raw, ok := vars["rnet_sockets"]; ok {
		st.Sockets = new(rnet.Sockets)
		if err := json.Unmarshal(raw, st.Sockets); err != nil {
			return fmt.Errorf("%s: the \"rnet_sockets\" variable: %v", target, err)
		}
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	if st.Sockets != nil {
		printSockets(stdout, *st.Sockets)
	}
	printStat(stdout, st.Metrics)
	return nil
}

// published is what a process publishes: its metrics and, from its
// "rnet_sockets" variable, its listeners and connections one by one.
type published struct {
	rnet.Metrics
	Sockets *rnet.Sockets `json:"sockets,omitempty"`
}

// printSockets prints the listeners and the connections, a row each, as
// ss does, and how many connections the process left out.
func printSockets(w io.Writer, s rnet.Sockets) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Listener\tAccepted\tBacklog\tPending\tRefused\tHandshake errors")
	for _, l := range s.Listeners {
		g, c := l.Metrics.Gauges, l.Metrics.Counters
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", l.Address, c.Accepted, g.Backlog, g.PendingHandshakes,
			totalByReason(c.Refused), totalByReason(c.HandshakeErrors))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Transport\tDevice\tLocal\tPeer\tQP\tRead\tWritten\tRings")
	for _, c := range s.Connections {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", c.Transport, orDash(c.Device), c.Local, c.Remote,
			c.QPNumber, c.BytesRead, c.BytesWritten, c.SendRingSize+c.RecvRingSize)
	}
	tw.Flush()
	// The process lists a bounded number of connections; the gauges below
	// count them all.
	switch s.MoreConnections {
	case 0:
	case 1:
		fmt.Fprintln(w, "... and 1 more connection")
	default:
		fmt.Fprintf(w, "... and %d more connections\n", s.MoreConnections)
	}
	fmt.Fprintln(w)
}

// totalByReason is the sum of counts and, if not zero, the reasons.
func totalByReason(counts map[string]uint64) string {
	var total uint64
	for _, n := range counts {
		total += n
	}
	if total == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", total, byReason(counts))
}

// printStat prints m as three tables: the open connections by transport
// and device, the other gauges, the counters.
func printStat(w io.Writer, m rnet.Metrics) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Transport\tDevice\tOpen")
	for _, c := range m.Gauges.Connections {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", c.Transport, orDash(c.Device), c.Count)
	}
	tw.Flush()
	fmt.Fprintln(w)
	g := m.Gauges
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Gauge\tNow")
	for _, row := range []struct {
		name string
		v    int64
	}{
		{"pending_handshakes", g.PendingHandshakes},
		{"queue_pairs", g.QueuePairs},
		{"memory_regions", g.MemoryRegions},
		{"pinned_bytes", g.PinnedBytes},
		{"poll_groups", g.PollGroups},
		{"shared_recv_queues", g.SharedRecvQueues},
		{"srq_depth", g.SRQDepth},
	} {
		fmt.Fprintf(tw, "%s\t%d\n", row.name, row.v)
	}
	tw.Flush()
	fmt.Fprintln(w)
	c := m.Counters
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Counter\tTotal\tBy reason")
	fmt.Fprintf(tw, "dials\t%d\t\n", c.Dials)
	fmt.Fprintf(tw, "accepts\t%d\t\n", c.Accepts)
	var fallbacks uint64
	reasons := map[string]uint64{}
	for r, n := range c.Fallbacks {
		fallbacks += n
		name, _ := r.MarshalText()
		reasons[string(name)] = n
	}
	fmt.Fprintf(tw, "fallbacks\t%d\t%s\n", fallbacks, byReason(reasons))
	var errs uint64
	for _, n := range c.HandshakeErrors {
		errs += n
	}
	fmt.Fprintf(tw, "handshake_errors\t%d\t%s\n", errs, byReason(c.HandshakeErrors))
	fmt.Fprintf(tw, "peers_gone\t%d\t\n", c.PeersGone)
	fmt.Fprintf(tw, "srq_refills\t%d\t\n", c.SRQRefills)
	tw.Flush()
}

// byReason lists the non-zero counts as reason=count, in name order.
func byReason(counts map[string]uint64) string {
	var parts []string
	for name, n := range counts {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", name, n))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}
