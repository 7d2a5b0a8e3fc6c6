// Command rnet looks at a machine's RDMA devices and measures rnet between
// two of them, the way iperf3 and rstream do for sockets.
//
//	rnet devices [-d DEVICE] [--json]             devices, ports, MTUs and GID tables with their IPs
//	rnet perf -s [addr] | -c host[:port] [flags]  throughput: serve, or stream to a server
//	rnet ping host[:port] [-c COUNT] [flags]      round trips to an rnet perf -s server
//	rnet scale -s [addr] | -c host[:port] [flags] many connections at once
//	rnet stat [--json] URL                        a process's rnet metrics, from its /debug/vars
//	rnet help [COMMAND]                           the commands, or one command's flags
//	rnet version                                  the module version (also -v)
//
// perf streams writes of -size bytes to the server for -t (or -n bytes) and
// reports throughput; -P runs parallel streams, -R has the server send, -a
// sweeps the write size. A live progress line goes to stderr, the summary
// to stdout (as one JSON object with --json, with a record per interval).
// ping sends -c messages of -size bytes, each echoed by the server, and
// reports round-trip percentiles, with a progress line per second.
// -tcp runs the same test over TCP, for a baseline on the same addresses;
// -d DEVICE binds to a device's address, as -from IP does.
// scale opens -conns connections to the server, echoes a checksummed message
// on each, holds them idle while the server measures its pinned bytes, fds,
// threads and CQs, streams on -busy of them, and prints a SCALE line.
//
// Help goes to stdout. Exit status: 0 success, 1 failure (with a one-line
// explanation on stderr, and with --json an {"error": ...} object on
// stdout), 2 bad usage (the mistake and two lines of usage on stderr).
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
	"strings"
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
		printUsage(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-v", "-version", "--version", "version":
		fmt.Fprintln(stdout, version())
		return 0
	case "-h", "-help", "--help", "help":
		return help(args[1:], stdout, stderr)
	}
	c, ok := lookupCommand(name)
	if !ok {
		printUsageError(stderr, "", fmt.Errorf("unknown command %q", name))
		return 2
	}
	var where target
	err := c.run(args[1:], stdout, stderr, &where)
	code := 1
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		printHelp(stdout, c)
		return 0
	case errors.Is(err, errUsage):
		code = 2
		printUsageError(stderr, name, err)
	default:
		fmt.Fprintf(stderr, "rnet %s: %v\n", name, err)
	}
	if wantsJSON(args[1:]) {
		e := ErrorResult{Error: err.Error(), Command: name, ExitCode: code, Usage: code == 2, Address: where.addr, Transport: where.transport}
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

// help prints the list of commands, or one command's help, on stdout.
func help(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		printUsage(stdout)
		return 0
	case len(args) > 1:
		printUsageError(stderr, "", fmt.Errorf("help takes one command, got %q", args))
		return 2
	}
	c, ok := lookupCommand(args[0])
	if !ok {
		printUsageError(stderr, "", fmt.Errorf("help: unknown command %q", args[0]))
		return 2
	}
	printHelp(stdout, c)
	return 0
}

// version names the module version this binary was built from: a release
// ("rnet v0.1.0"), or "rnet devel" for a build inside the module, with the
// commit when the go command recorded one.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	return versionOf(bi, ok)
}

func versionOf(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "rnet devel"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var extra []string
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			extra = append(extra, "commit "+s.Value[:min(len(s.Value), 12)])
		}
		if s.Key == "vcs.modified" && s.Value == "true" {
			extra = append(extra, "modified")
		}
	}
	if bi.GoVersion != "" {
		extra = append(extra, bi.GoVersion)
	}
	if len(extra) == 0 {
		return "rnet " + v
	}
	return "rnet " + v + " (" + strings.Join(extra, ", ") + ")"
}
