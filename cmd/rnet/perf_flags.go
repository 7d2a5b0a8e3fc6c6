package main

import (
	"flag"
	"io"
	"sync/atomic"
	"time"
)

type perfOpts struct {
	server   bool
	addr     string // listen address (-s) or server (-c)
	client   string
	from     string
	size     int
	duration time.Duration
	bytes    int64
	interval time.Duration
	parallel int
	reverse  bool
	sweep    bool
	tcp      bool
	fallback bool
	json     bool
	quiet    bool
	once     bool
	metrics  string // server: where to serve /debug/vars, or ""
	rdma     rdmaFlags
	limits   serverLimits
	// timeUp, if set, says when -t has passed in place of the clock
	// (tests): once it is true.
	timeUp *atomic.Bool
}

const perfUsage = `usage: rnet perf -s [addr] [flags]          serve perf and ping clients (default :7471)
       rnet perf -c host[:port] [flags]     measure throughput to a server
`

// perfFlags defines perf's flags on a new FlagSet that fills o.
func perfFlags(o *perfOpts, size *int64, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("rnet perf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { printHelp(fs.Output(), perfUsage, fs) }
	fs.BoolVar(&o.server, "s", false, "serve perf and ping clients, on [addr] (default :7471)")
	fs.StringVar(&o.client, "c", "", "run the client against `host[:port]`")
	fs.StringVar(&o.from, "from", "", "client: local `IP` to connect from (picks the RDMA device)")
	fs.Var(byteSize{size}, "size", "client: `bytes` per write, such as 64, 4K or 1M (default 64K)")
	fs.DurationVar(&o.duration, "t", 10*time.Second, "client: how long to send (with -a: per size, default 1s)")
	fs.Var(byteSize{&o.bytes}, "n", "client: send this many `bytes` in all (such as 1G) instead of for -t")
	fs.DurationVar(&o.interval, "i", time.Second, "client: interval of the progress lines and of --json's intervals")
	fs.IntVar(&o.parallel, "P", 1, "client: parallel streams, each its own connection (-n is shared among them)")
	fs.BoolVar(&o.reverse, "R", false, "client: reverse the direction: the server sends, the client receives")
	fs.BoolVar(&o.sweep, "a", false, "client: sweep -size from 2 B to 8 MiB in powers of two, one line per size (each moves -n bytes, at least one write per stream)")
	fs.BoolVar(&o.tcp, "tcp", false, "use TCP instead of RDMA (the baseline)")
	fs.BoolVar(&o.fallback, "fallback", false, "client: fall back to TCP where RDMA cannot be used; server: serve RDMA and TCP on one port")
	fs.BoolVar(&o.json, "json", false, "print the summary as JSON (errors too, as {\"error\": ...})")
	fs.BoolVar(&o.quiet, "q", false, "client: no progress lines")
	fs.BoolVar(&o.once, "once", false, "server: exit after serving one test (all of a -P test's streams)")
	fs.StringVar(&o.metrics, "metrics", "", "server: serve the process's /debug/vars (rnet's metrics, for rnet stat) over HTTP on `addr`")
	o.rdma.register(fs)
	o.limits.register(fs)
	return fs
}

func parsePerf(args []string, stderr io.Writer) (perfOpts, error) {
	o := perfOpts{}
	size := int64(64 << 10)
	fs := perfFlags(&o, &size, stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return o, err
	}
	o.size = int(min(size, maxSize+1))
	if o.sweep && !flagSet(fs, "t") {
		o.duration = time.Second
	}
	switch {
	case o.server && o.client != "":
		return o, usageErr(stderr, "perf: -s and -c exclude each other")
	case !o.server && o.client == "":
		return o, usageErr(stderr, "perf: pass -s [addr] to serve or -c host to measure")
	case len(pos) > 1 || (len(pos) == 1 && !o.server):
		return o, usageErr(stderr, "perf: unexpected arguments %q", pos)
	case o.size <= 0 || o.size > maxSize:
		return o, usageErr(stderr, "perf: -size must be in 1..%d", maxSize)
	case o.bytes < 0 || o.duration <= 0 || o.interval <= 0:
		return o, usageErr(stderr, "perf: -n, -t and -i must be positive")
	case o.duration > maxReverseDuration:
		return o, usageErr(stderr, "perf: -t must be at most %v", maxReverseDuration)
	case o.parallel < 1 || o.parallel > maxStreams:
		return o, usageErr(stderr, "perf: -P must be in 1..%d", maxStreams)
	case o.bytes > 0 && o.bytes < int64(o.parallel):
		return o, usageErr(stderr, "perf: -n %d cannot be shared among -P %d streams", o.bytes, o.parallel)
	case o.reverse && share(o.bytes, 0, o.parallel) > maxReverseBytes:
		return o, usageErr(stderr, "perf: with -R a stream takes at most 1T (-n %d over -P %d streams); raise -P", o.bytes, o.parallel)
	}
	if err := o.rdma.check(); err != nil {
		return o, usageErr(stderr, "perf: %v", err)
	}
	if err := o.limits.check(); err != nil {
		return o, usageErr(stderr, "perf: %v", err)
	}
	target := o.client
	if o.server && len(pos) == 1 {
		target = pos[0]
	}
	if o.addr, err = hostPort(target); err != nil {
		return o, usageErr(stderr, "perf: %v", err)
	}
	return o, nil
}
