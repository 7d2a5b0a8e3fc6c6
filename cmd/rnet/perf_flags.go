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
	device   string // -d: bind to this device's address
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

var perfCommand = command{
	name:     "perf",
	synopsis: "rnet perf -s [addr] | -c host[:port] [flags]",
	summary:  "throughput: serve perf and ping clients, or stream to a server",
	about: `rnet perf -s serves perf and ping clients on addr (default :7471, rstream's port).
rnet perf -c streams writes of -size bytes to the server for -t, or -n bytes in all,
and reports throughput; -P runs parallel streams, -R has the server send, -a sweeps
the write size. Progress goes to stderr, the summary to stdout.
`,
	flags: func() *flag.FlagSet { return perfFlags(&perfOpts{}) },
	run: func(args []string, stdout, stderr io.Writer, where *target) error {
		o, err := parsePerf(args)
		if err != nil {
			return err
		}
		where.addr, where.transport = o.addr, netName(o.tcp)
		if o.server {
			return runServer(o, stdout, stderr)
		}
		return runPerf(o, stdout, stderr)
	},
}

// perfFlags defines perf's flags on a new FlagSet that fills o, with their
// defaults.
func perfFlags(o *perfOpts) *flag.FlagSet {
	fs := newFlagSet("perf")
	fs.BoolVar(&o.server, "s", false, "serve perf and ping clients, on [addr] (default :7471)")
	fs.StringVar(&o.client, "c", "", "run the client against `host[:port]`")
	fs.StringVar(&o.device, "d", "", "the RDMA `device` to use, by name (rxe0, mlx5_0): bind to its address")
	fs.StringVar(&o.from, "from", "", "client: local `IP` to connect from (picks the RDMA device)")
	o.size = 64 << 10
	fs.Var(byteSize[int]{&o.size}, "size", "client: `bytes` per write, such as 64, 4K or 1.5M")
	fs.DurationVar(&o.duration, "t", 10*time.Second, "client: how long to send (with -a: per size, default 1s)")
	fs.Var(byteSize[int64]{&o.bytes}, "n", "client: send this many `bytes` in all (such as 1G) instead of for -t")
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

func parsePerf(args []string) (perfOpts, error) {
	o := perfOpts{}
	fs := perfFlags(&o)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return o, err
	}
	if o.sweep && !flagSet(fs, "t") {
		o.duration = time.Second
	}
	switch {
	case o.server && o.client != "":
		return o, usageErrorf("-s and -c exclude each other")
	case !o.server && o.client == "":
		return o, usageErrorf("pass -s [addr] to serve or -c host to measure")
	case len(pos) > 1 || (len(pos) == 1 && !o.server):
		return o, usageErrorf("unexpected arguments %q", pos)
	case o.device != "" && o.from != "":
		return o, usageError{deviceAndFrom}
	case o.size <= 0 || o.size > maxSize:
		return o, usageErrorf("-size must be in 1..%d (64M)", maxSize)
	case o.bytes < 0 || o.duration <= 0 || o.interval <= 0:
		return o, usageErrorf("-n, -t and -i must be positive")
	case o.duration > maxReverseDuration:
		return o, usageErrorf("-t must be at most %v", maxReverseDuration)
	case o.parallel < 1 || o.parallel > maxStreams:
		return o, usageErrorf("-P must be in 1..%d", maxStreams)
	case o.bytes > 0 && o.bytes < int64(o.parallel):
		return o, usageErrorf("-n %d cannot be shared among -P %d streams", o.bytes, o.parallel)
	case o.reverse && share(o.bytes, 0, o.parallel) > maxReverseBytes:
		return o, usageErrorf("with -R a stream takes at most 1T (-n %d over -P %d streams); raise -P", o.bytes, o.parallel)
	}
	if err := o.rdma.check(); err != nil {
		return o, usageError{err.Error()}
	}
	if err := o.limits.check(); err != nil {
		return o, usageError{err.Error()}
	}
	target := o.client
	if o.server && len(pos) == 1 {
		target = pos[0]
	}
	if o.addr, err = hostPort(target); err != nil {
		return o, usageError{err.Error()}
	}
	return o, nil
}
