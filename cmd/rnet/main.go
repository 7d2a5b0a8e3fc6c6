// Command rnet looks at a machine's RDMA devices and measures rnet between
// two of them, the way iperf and rstream do for sockets.
//
//	rnet devices [--json]                     devices, ports, MTUs and GID tables with their IPs
//	rnet perf -s [addr] [-once] [-tcp]        serve perf and ping clients (default :7471)
//	rnet perf -c host[:port] [-size N] [-t 10s | -n BYTES] [-from ip] [-tcp] [--json]
//	rnet ping host[:port] [-size 64] [-n 1000] [-from ip] [-tcp] [--json]
//	rnet scale -s [addr] [-tcp]                serve one scale client (control on port+1)
//	rnet scale -c host[:port] [-conns 10000] [-parallel 16] [-busy 100] [-from ip] [--json]
//
// perf streams writes of -size bytes to the server for -t (or -n bytes) and
// reports throughput; a live progress line goes to stderr, the summary to
// stdout (as one JSON object with --json). ping sends -n messages of -size
// bytes, each echoed by the server, and reports round-trip percentiles.
// -tcp runs the same test over TCP, for a baseline on the same addresses.
// scale opens -conns connections to the server, echoes a checksummed message
// on each, holds them idle while the server measures its pinned bytes, fds,
// threads and CQs, streams on -busy of them, and prints a SCALE line.
//
// Exit status: 0 success, 1 failure (with a one-line explanation on stderr),
// 2 bad usage.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

func main() {
	// RNET_CPUPROFILE=file writes a CPU profile of the whole run, for
	// finding where a benchmark's time goes (go tool pprof file).
	if path := os.Getenv("RNET_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rnet: RNET_CPUPROFILE:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "rnet: RNET_CPUPROFILE:", err)
			os.Exit(1)
		}
		code := run(os.Args[1:], os.Stdout, os.Stderr)
		pprof.StopCPUProfile()
		f.Close()
		os.Exit(code)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks a command-line mistake (exit status 2); the message has
// already been printed.
var errUsage = errors.New("usage")

const usage = `usage:
  rnet devices [--json]
  rnet perf -s [addr] [-once] [-tcp] [--json]
  rnet perf -c host[:port] [-size N] [-t DURATION | -n BYTES] [-from IP] [-tcp] [--json] [-q]
  rnet ping host[:port] [-size N] [-n COUNT] [-from IP] [-tcp] [--json]
  rnet scale -s [addr] [-tcp]
  rnet scale -c host[:port] [-conns N] [-parallel N] [-busy N] [-busy-bytes N] [-from IP] [-tcp] [--json]
  rnet --version
Sizes take the suffixes K, M, G (powers of 1024): -size 4K, -n 1G.
Run "rnet COMMAND -h" for a command's flags.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "devices":
		var o devicesOpts
		if o, err = parseDevices(args[1:], stderr); err == nil {
			err = runDevices(o, stdout)
		}
	case "perf":
		var o perfOpts
		if o, err = parsePerf(args[1:], stderr); err == nil {
			if o.server {
				err = runServer(o, stdout, stderr)
			} else {
				err = runPerf(o, stdout, stderr)
			}
		}
	case "ping":
		var o pingOpts
		if o, err = parsePing(args[1:], stderr); err == nil {
			err = runPing(o, stdout)
		}
	case "scale":
		var o scaleOpts
		if o, err = parseScale(args[1:], stderr); err == nil {
			if o.server {
				err = runScaleServer(o, stdout, stderr)
			} else {
				err = runScaleClient(o, stdout, stderr)
			}
		}
	case "-version", "--version", "version":
		fmt.Fprintln(stdout, version())
		return 0
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "rnet: unknown command %q\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(stderr, "rnet %s: %v\n", args[0], err)
	return 1
}

// parseInterleaved parses flags that may come before and after positional
// arguments ("perf -s 10.0.0.1 --json"), returning the positionals.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func usageErr(w io.Writer, format string, a ...any) error {
	fmt.Fprintf(w, "rnet: "+format+"\n", a...)
	return errUsage
}
