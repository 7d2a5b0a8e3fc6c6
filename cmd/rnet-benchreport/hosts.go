package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rnet-dev/rnet/internal/hostlab"
)

// hostsOnly are the flags that -hosts itself takes or sets for host A's run,
// which it does not pass on from its own command line.
var hostsOnly = map[string]bool{
	"hosts": true, "hosts-append": true, "exec-listen": true, "exec-on": true,
	"server-exec": true, "server": true, "client": true, "sdev": true, "cdev": true, "gofloor": true,
}

// runHosts boots the two-host lab with its wire direct (no relay between
// the qemus) and the guest kernel arguments appendArgs, starts an exec
// server on host B's wire address at execPort, and runs this program on
// host A with this command line's other flags, its servers on B through the
// exec server. Host A's output is printed as it comes.
func runHosts(appendArgs string, execPort int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if strings.ContainsAny(self, " \t\n") {
		return fmt.Errorf("-hosts: this program's path %q has a space, which -server-exec cannot carry", self)
	}
	if os.Getenv("RNET_GUEST") == "1" {
		return fmt.Errorf("-hosts boots the lab from the machine, not from a guest")
	}
	var args []string
	out := "bench-results"
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "out" {
			out = f.Value.String()
		}
		if !hostsOnly[f.Name] {
			args = append(args, "-"+f.Name+"="+f.Value.String())
		}
	})
	// The hosts share only the current directory with this machine, read-write.
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	absOut, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(cwd, absOut); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("-hosts: -out %s is outside the current directory %s, the only one the hosts can write to", out, cwd)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	bootCtx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	lab, err := hostlab.Boot(bootCtx, hostlab.Config{Direct: true, Append: appendArgs, Log: os.Stderr})
	cancel()
	if err != nil {
		return err
	}
	defer lab.Close()
	a, b := lab.A, lab.B
	fmt.Fprintf(os.Stderr, "== two hosts up in %.0f s: client host a %s (%s), server host b %s (%s)\n",
		time.Since(start).Seconds(), a.Addr(0), a.Device(0), b.Addr(0), b.Device(0))

	execAddr := net.JoinHostPort(b.Addr(0).String(), strconv.Itoa(execPort))
	server, err := b.Start(nil, prefixed(os.Stderr, "host b: "), self, "-exec-listen", execAddr)
	if err != nil {
		return err
	}
	listenCtx, cancel := context.WithTimeout(ctx, time.Minute)
	_, err = server.WaitFor(listenCtx, "exec server listening on")
	cancel()
	if err != nil {
		return err
	}
	args = append(args,
		"-server-exec", self+" -exec-on "+execAddr,
		"-server", b.Addr(0).String(), "-client", a.Addr(0).String(),
		"-sdev", b.Device(0), "-cdev", a.Device(0),
		// gofloor ping-pongs two processes on one host, and each host has one CPU.
		"-gofloor", "none")
	client, err := a.Start(nil, prefixed(os.Stdout, ""), append([]string{self}, args...)...)
	if err != nil {
		return err
	}
	if err := client.Wait(ctx); err != nil {
		return fmt.Errorf("on host a: %w", err)
	}
	return nil
}

// prefixed prints each line of a host's command to w after prefix.
func prefixed(w *os.File, prefix string) func(string) {
	return func(line string) { fmt.Fprintln(w, prefix+line) }
}

// execOnMain is -exec-on: args are NAME=value entries, then the command and
// its arguments; it returns the command's exit code.
func execOnMain(addr string, args []string) int {
	var env []string
	for len(args) > 0 && isEnvEntry(args[0]) {
		env, args = append(env, args[0]), args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "rnet-benchreport -exec-on: no command")
		return 2
	}
	code, err := execOn(context.Background(), addr, env, args, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rnet-benchreport -exec-on:", err)
		return 1
	}
	return code
}

// isEnvEntry reports whether arg is NAME=value, NAME a shell variable name.
func isEnvEntry(arg string) bool {
	name, _, ok := strings.Cut(arg, "=")
	if !ok || name == "" {
		return false
	}
	for i, r := range name {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
