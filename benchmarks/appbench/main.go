// Command appbench measures applications over rnet and over TCP: gRPC unary
// calls and server streaming, HTTP/1.1 and HTTP/2 requests with verified
// bodies, and, for each workload, both processes' work per call (goroutine
// wakeups, thread context switches, system calls and rnet's counters).
//
//	appbench -s 10.77.0.2:18000 [-tcp]                  # gRPC on 18000, HTTP on 18001
//	appbench -c 10.77.0.2:18000 -from 10.77.0.1 [-tcp]  # one JSON line per workload
//
// The client asks the server for its counters over a gRPC call of its own
// before and after each workload, and stops the server at the end.
// rnet-benchreport runs it in `make bench` (see docs/benchmarks.md).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("appbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	srvAddr := fs.String("s", "", "serve gRPC on this host:port and HTTP on the next port")
	cliAddr := fs.String("c", "", "run the workloads against the server at this host:port")
	from := fs.String("from", "", "the client's local IP address (picks the RDMA device)")
	tcp := fs.Bool("tcp", false, "use TCP instead of rnet")
	scale := fs.Float64("scale", 1, "scale every workload's calls")
	only := fs.String("run", "", "run only the workloads whose name/size/cN matches this regexp")
	list := fs.Bool("list", false, "list the workloads and exit")
	perf := fs.String("perf", "", "count every system call of each workload with this perf command (perf stat -e "+perfEvent+" -p PID); none if empty")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *list {
		for _, w := range workloads() {
			fmt.Fprintln(stdout, w.id(), w.calls)
		}
		return 0
	}
	t := &transport{tcp: *tcp}
	if *from != "" {
		if t.from = net.ParseIP(*from); t.from == nil {
			fmt.Fprintf(stderr, "appbench: -from %q is not an IP address\n", *from)
			return 2
		}
	}
	var err error
	switch {
	case *srvAddr != "" && *cliAddr == "":
		err = serve(t, *srvAddr, *perf, http.HandlerFunc(dataHandler), func(g, h string) {
			fmt.Fprintf(stdout, "appbench: listening on %s (gRPC) and %s (HTTP) over %s\n", g, h, t.name())
		})
	case *cliAddr != "" && *srvAddr == "":
		var re *regexp.Regexp
		if re, err = regexp.Compile(*only); err != nil {
			fmt.Fprintln(stderr, "appbench: -run:", err)
			return 2
		}
		host, port, perr := net.SplitHostPort(*cliAddr)
		p, aerr := strconv.Atoi(port)
		if perr != nil || aerr != nil {
			fmt.Fprintf(stderr, "appbench: -c %q: want host:port\n", *cliAddr)
			return 2
		}
		err = runClient(context.Background(), t, *cliAddr, net.JoinHostPort(host, strconv.Itoa(p+1)), *scale, re, *perf, stdout)
	default:
		fmt.Fprintln(stderr, "appbench: give -s ADDR or -c ADDR")
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "appbench:", err)
		return 1
	}
	return 0
}

// runClient runs the selected workloads against the server, prints
// one JSON line (perfjson.AppResult) per workload and stops the server.
func runClient(ctx context.Context, t *transport, grpcAddr, httpAddr string, scale float64, only *regexp.Regexp, perf string, stdout io.Writer) error {
	cl, err := newClient(t, grpcAddr, httpAddr, perf)
	if err != nil {
		return err
	}
	defer cl.Close()
	enc := json.NewEncoder(stdout)
	for _, w := range workloads() {
		if !only.MatchString(w.id()) {
			continue
		}
		res, err := cl.run(ctx, w, max(int(float64(w.calls)*scale), 10))
		if err != nil {
			return err
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	return cl.stopServer(ctx)
}
