// Command rnet-benchreport measures rnet against C rsocket (rstream), the
// device's own limit (ib_write_bw, ib_write_lat) and TCP, side by side on
// one pair of RDMA devices, repeats every measurement -runs times, and
// writes the medians as a table (stdout and bench.txt), JSON (bench.json)
// and an SVG plot (bench.svg). `make bench` runs it in the Soft-RoCE guest.
//
//	rnet-benchreport -rnet ./rnet -runs 3 -out bench-results
//	rnet-benchreport -replot bench-results/bench.json   # table and SVG again
//
// rnet's and TCP's figures come from the rnet command (rnet perf, rnet ping
// and their -tcp baselines), so they are what a user reproduces by hand.
//
// With -server-exec the servers run on another host and the clients here;
// -hosts does that across the two-host lab (`make bench-hosts`):
//
//	rnet-benchreport -hosts -rnet ./rnet -runs 3 -out bench-results/hosts
//
// It is a module of its own (go.mod beside this file), so that gonum/plot,
// which draws its SVG, is not among the core module's requirements.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	var c config
	replot := flag.String("replot", "", "read this bench.json and write its table and SVG next to it, measuring nothing")
	flag.StringVar(&c.rnet, "rnet", "", "the rnet command (default: rnet next to this program)")
	flag.IntVar(&c.runs, "runs", 3, "repeat every measurement this many times; report medians")
	flag.StringVar(&c.out, "out", "bench-results", "directory for bench.json, bench.txt and bench.svg")
	flag.StringVar(&c.server, "server", envOr("RNET_TEST_SERVER", "10.77.0.2"), "server IP (on -sdev)")
	flag.StringVar(&c.client, "client", envOr("RNET_TEST_CLIENT", "10.77.0.1"), "client IP (on -cdev)")
	flag.StringVar(&c.sdev, "sdev", "rxe1", "server RDMA device, for ib_write_*")
	flag.StringVar(&c.cdev, "cdev", "rxe0", "client RDMA device, for ib_write_*")
	flag.IntVar(&c.gid, "gid", 1, "GID index of the IPv4 addresses, for ib_write_* (-x)")
	flag.Float64Var(&c.scale, "scale", 1, "scale the bytes and iterations of every test")
	flag.IntVar(&c.port, "port", 18100, "first TCP/RDMA port to use")
	flag.BoolVar(&c.verbose, "v", false, "print every command and its output")
	flag.StringVar(&c.gofloor, "gofloor", "", "benchmarks/gofloor's binary, for the Go runtime's floor (default: gofloor next to this program, skipped if absent; \"none\" skips it)")
	flag.StringVar(&c.gofloorC, "gofloor-c", "", "gofloor's C twin (default: gofloor-c next to gofloor)")
	flag.StringVar(&c.rnetCounting, "rnet-counting", "", "the rnet command built with -tags rnet_lockcount, for the locks per round trip of rnet-poll's latency tests (default: rnet-lockcount next to this program, skipped if absent; \"none\" skips it)")
	flag.StringVar(&c.appbench, "appbench", "", "benchmarks/appbench's binary, for the applications (default: appbench next to this program, skipped if absent; \"none\" skips them)")
	flag.StringVar(&c.appbenchRun, "appbench-run", "", "measure only the application workloads matching this regexp (appbench -run)")
	flag.StringVar(&c.perf, "perf", "", "perf, with which appbench counts every system call of each workload (default: perf on PATH, skipped if absent; \"none\" skips it)")
	flag.IntVar(&c.rnetBuffer, "rnet-buffer", 1<<20, "rnet's ring size in bytes (RNET_BUFFER_SIZE); the default matches rstream, which asks for 512 KiB SO_SNDBUF/SO_RCVBUF and rsocket doubles that; 0 keeps rnet's default")
	serverExec := flag.String("server-exec", "", "run every server through this command, which runs its arguments (NAME=value entries, then the command) on the server's host: \"rnet-benchreport -exec-on ADDR\" or \"ssh HOST\"; the clients run here")
	execListen := flag.String("exec-listen", "", "be an exec server on this address (HOST:PORT) for -exec-on, and measure nothing; it runs whatever it is sent, so listen on a private network only")
	execAddr := flag.String("exec-on", "", "run the arguments (NAME=value entries, then a command) on the exec server at this address, print their output and exit with their exit code")
	hosts := flag.Bool("hosts", false, "boot the two-host lab (internal/hostlab: host A and host B, one CPU each, joined directly by their wire), run the servers on B through an exec server and this program with the other flags on A")
	hostsAppend := flag.String("hosts-append", "tsc=reliable clocksource=tsc", "with -hosts, the guests' extra kernel arguments")
	flag.Parse()
	switch {
	case *execListen != "":
		err := serveExec(*execListen, func(a net.Addr) { fmt.Println("exec server listening on", a) })
		fmt.Fprintln(os.Stderr, "rnet-benchreport:", err)
		os.Exit(1)
	case *execAddr != "":
		os.Exit(execOnMain(*execAddr, flag.Args()))
	case *hosts:
		if err := runHosts(*hostsAppend, c.port-1); err != nil {
			fmt.Fprintln(os.Stderr, "rnet-benchreport:", err)
			os.Exit(1)
		}
		return
	}
	c.serverExec = strings.Fields(*serverExec)
	if *replot != "" {
		if err := replotFile(*replot); err != nil {
			fmt.Fprintln(os.Stderr, "rnet-benchreport:", err)
			os.Exit(1)
		}
		return
	}
	exe, _ := os.Executable()
	if c.rnet == "" {
		c.rnet = filepath.Join(filepath.Dir(exe), "rnet")
	}
	switch c.gofloor {
	case "none":
		c.gofloor = ""
	case "":
		if p := filepath.Join(filepath.Dir(exe), "gofloor"); fileExists(p) {
			c.gofloor = p
		}
	}
	switch c.rnetCounting {
	case "none":
		c.rnetCounting = ""
	case "":
		if p := filepath.Join(filepath.Dir(exe), "rnet-lockcount"); fileExists(p) {
			c.rnetCounting = p
		}
	}
	switch c.appbench {
	case "none":
		c.appbench = ""
	case "":
		if p := filepath.Join(filepath.Dir(exe), "appbench"); fileExists(p) {
			c.appbench = p
		}
	}
	switch c.perf {
	case "none":
		c.perf = ""
	case "":
		c.perf, _ = exec.LookPath("perf")
	}
	if c.gofloor != "" && c.gofloorC == "" {
		c.gofloorC = filepath.Join(filepath.Dir(c.gofloor), "gofloor-c")
	}
	if c.runs < 1 {
		fmt.Fprintln(os.Stderr, "rnet-benchreport: -runs must be at least 1")
		os.Exit(2)
	}
	r, err := measure(&c)
	if err == nil {
		err = write(r, c.out, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rnet-benchreport:", err)
		os.Exit(1)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
