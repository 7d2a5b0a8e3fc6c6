// Command rnet looks at a machine's RDMA devices and measures rnet between
// two of them, the way iperf and rstream do for sockets.
//
//	rnet devices [--json]                     devices, ports, MTUs and GID tables with their IPs
//	rnet perf -s [addr] [-once] [-tcp]        serve perf and ping clients (default :7471)
//	rnet perf -c host[:port] [-size N] [-t 10s | -n BYTES] [-P N] [-R] [-a] [-from ip] [-tcp] [--json]
//	rnet ping host[:port] [-size 64] [-n 1000] [-from ip] [-tcp] [--json]
//	rnet stat [--json] URL                    a process's rnet metrics, from its /debug/vars
//	rnet help [COMMAND]
//	rnet scale -s [addr] [-tcp]                serve one scale client (control on port+1)
//	rnet scale -c host[:port] [-conns 10000] [-parallel 16] [-busy 100] [-from ip] [--json]
//
// perf streams writes of -size bytes to the server for -t (or -n bytes) and
// reports throughput; -P runs parallel streams, -R has the server send, -a
// sweeps the write size. A live progress line goes to stderr, the summary
// to stdout (as one JSON object with --json, with a record per interval).
// ping sends -n messages of -size bytes, each echoed by the server, and
// reports round-trip percentiles, with a progress line per second.
// -tcp runs the same test over TCP, for a baseline on the same addresses.
// scale opens -conns connections to the server, echoes a checksummed message
// on each, holds them idle while the server measures its pinned bytes, fds,
// threads and CQs, streams on -busy of them, and prints a SCALE line.
//
// Exit status: 0 success, 1 failure (with a one-line explanation on stderr,
// and with --json an {"error": ...} object on stdout), 2 bad usage.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
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

const usage = `usage:
  rnet devices [--json]
  rnet perf -s [addr] [-once] [-tcp] [--json] [-hello-timeout D] [-idle-timeout D] [-max-conns N] [-max-pinned N] [-max-buffered N]
  rnet perf -c host[:port] [-size N] [-t DURATION | -n BYTES] [-P N] [-R] [-a] [-from IP] [-tcp] [--json] [-q]
  rnet ping host[:port] [-size N] [-n COUNT] [-from IP] [-tcp] [--json] [-q]
  rnet scale -s [addr] [-tcp]
  rnet scale -c host[:port] [-conns N] [-parallel N] [-busy N] [-busy-bytes N] [-from IP] [-tcp] [--json]
  rnet stat [--json] URL
  rnet help [COMMAND]
  rnet --version
perf and ping also take -buffer SIZE, -busy-poll D, -busy-poll-limit D and -ack-timeout D
(rnet's Config; they override RNET_BUFFER_SIZE, RNET_BUSY_POLL, ... of the environment).
Sizes take the suffixes K, M, G (powers of 1024): -size 4K, -n 1G.
Run "rnet help COMMAND" for a command's flags.
`

// ErrorResult is what a command given --json prints on stdout when it
// fails, in place of its result; the exit status stays non-zero.
type ErrorResult struct {
	Error     string `json:"error"`
	Command   string `json:"command"`
	ExitCode  int    `json:"exit_code"` // 1 failure, 2 bad usage
	Usage     bool   `json:"usage,omitempty"`
	Address   string `json:"address,omitempty"` // the server, or the address served
	Transport string `json:"transport,omitempty"`
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	var addr, transport string
	switch args[0] {
	case "devices":
		var o devicesOpts
		if o, err = parseDevices(args[1:], stderr); err == nil {
			err = runDevices(o, stdout)
		}
	case "perf":
		var o perfOpts
		if o, err = parsePerf(args[1:], stderr); err == nil {
			addr, transport = o.addr, netName(o.tcp)
			if o.server {
				err = runServer(o, stdout, stderr)
			} else {
				err = runPerf(o, stdout, stderr)
			}
		}
	case "ping":
		var o pingOpts
		if o, err = parsePing(args[1:], stderr); err == nil {
			addr, transport = o.addr, netName(o.tcp)
			err = runPing(o, stdout, stderr)
		}
	case "scale":
		var o scaleOpts
		if o, err = parseScale(args[1:], stderr); err == nil {
			addr, transport = o.addr, netName(o.tcp)
			if o.server {
				err = runScaleServer(o, stdout, stderr)
			} else {
				err = runScaleClient(o, stdout, stderr)
			}
		}
	case "stat":
		var o statOpts
		if o, err = parseStat(args[1:], stderr); err == nil {
			addr = o.url
			err = runStat(o, stdout)
		}
	case "-version", "--version", "version":
		fmt.Fprintln(stdout, version())
		return 0
	case "-h", "-help", "--help", "help":
		return help(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "rnet: unknown command %q\n%s", args[0], usage)
		return 2
	}
	code := 1
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		code = 2
	default:
		fmt.Fprintf(stderr, "rnet %s: %v\n", args[0], err)
	}
	if wantsJSON(args[1:]) {
		e := ErrorResult{Error: err.Error(), Command: args[0], ExitCode: code, Usage: code == 2, Address: addr, Transport: transport}
		json.NewEncoder(stdout).Encode(e)
	}
	return code
}

// wantsJSON reports whether the command line asks for --json, even one
// that does not parse.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "-json", "--json", "-json=true", "--json=true":
			return true
		case "--":
			return false
		}
	}
	return false
}

// help prints the list of commands, or one command's flags.
func help(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return 0
	}
	var fs *flag.FlagSet
	var text string
	switch args[0] {
	case "perf":
		var size int64
		fs, text = perfFlags(&perfOpts{}, &size, stdout), perfUsage
	case "ping":
		var size int64
		fs, text = pingFlags(&pingOpts{}, &size, stdout), pingUsage
	case "devices":
		fs, text = devicesFlags(&devicesOpts{}, stdout), "usage: rnet devices [--json]\n"
	case "scale":
		fs, text = scaleFlags(&scaleOpts{}, stdout), "usage: rnet scale -s [addr] | -c host[:port] [flags]\n"
	case "stat":
		fs, text = statFlags(&statOpts{}, stdout), statUsage
	default:
		fmt.Fprintf(stderr, "rnet help: unknown command %q\n%s", args[0], usage)
		return 2
	}
	printHelp(stdout, text, fs)
	return 0
}

// version is the module version this binary was built from, as the go
// command recorded it ("(devel)" for a build inside the module).
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " (" + s.Value[:12] + ")"
		}
	}
	return "rnet " + v + " " + bi.GoVersion
}
