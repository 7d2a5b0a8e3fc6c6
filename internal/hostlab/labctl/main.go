// Command labctl boots the two-host lab and runs the commands of a person's
// session on it: jobs on either host, and faults of hosts and wires, one
// command per input line. scripts/softroce-hosts builds and runs it; its
// usage text lists the commands.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rnet-dev/rnet/internal/hostlab"
)

func main() {
	fi, err := os.Stdin.Stat()
	interactive := err == nil && fi.Mode()&os.ModeCharDevice != 0 // a terminal
	os.Exit(run(os.Args[1:], os.Stdin, interactive, os.Stdout, os.Stderr))
}

// run boots the lab and runs the session read from in; it returns the
// exit status. A session that is not interactive stops at the first
// command that fails.
func run(args []string, in io.Reader, interactive bool, stdout, stderr io.Writer) int {
	cfg, verbose, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "softroce-hosts: %v\n", err)
		return 2
	}
	if verbose {
		cfg.Log = stderr
	}
	// The qemus run in process groups of their own, so a ^C reaches only
	// this process: it must power them off itself.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	out := &printer{w: stdout}
	bootStart := time.Now()
	wireKind := "through the relay"
	if cfg.Direct {
		wireKind = "direct, no relay"
	}
	out.line("== booting hosts a and b: wires %s (%s), MTU %d on a, %d on b",
		strings.Join(cfg.Devices, ","), wireKind, cfg.MTU[0], cfg.MTU[1])
	ctx, cancel := context.WithCancel(context.Background())
	booted := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-booted:
		}
	}()
	lab, err := hostlab.Boot(ctx, cfg)
	close(booted)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "softroce-hosts: %v\n", err)
		if !verbose {
			fmt.Fprintln(stderr, "softroce-hosts: -v shows the driver's steps and the guests' logs")
		}
		return 1
	}
	s := &session{lab: lab, out: out, start: time.Now()}
	for _, h := range []*hostlab.Host{lab.A, lab.B} {
		var ends []string
		for i := range lab.Wires() {
			ends = append(ends, fmt.Sprintf("%s %s %s", h.Addr(i), h.Addr6(i), h.Device(i)))
		}
		s.note("host %s up: %s", h.Name, strings.Join(ends, "; "))
	}
	s.note("both up in %.1fs", time.Since(bootStart).Seconds())
	if interactive {
		s.note("type commands, one per line; help lists them, quit or ^D ends")
	}
	status := s.loop(in, interactive, sigs)
	s.note("quit: powering both hosts off")
	lab.Close()
	// Let the jobs' ends be printed: each host's end reaches its jobs soon
	// after its qemu exits.
	timeout := time.After(5 * time.Second)
	s.mu.Lock()
	jobs := s.jobs
	s.mu.Unlock()
	for _, j := range jobs {
		select {
		case <-j.reported:
		case <-timeout:
		}
	}
	return status
}

// loop reads and runs commands until quit, the end of the input or a
// signal other than a ^C that interrupts a waiting command.
func (s *session) loop(in io.Reader, interactive bool, sigs <-chan os.Signal) int {
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	status := 0
	for {
		var line string
		select {
		case sig := <-sigs:
			s.note("%v", sig)
			return 130
		case l, ok := <-lines:
			if !ok {
				return status
			}
			line = l
		}
		c, err := parseCommand(line, s.lab.Wires())
		if err == nil && c.op == "" {
			continue
		}
		if err == nil && c.op == "quit" {
			return status
		}
		if err == nil {
			switch c.op {
			case "wait", "expect", "sleep", "kill":
				s.note("> %s", strings.TrimSpace(line))
			}
			err = s.interruptible(c, sigs)
		}
		if errors.Is(err, errQuit) {
			return 130
		}
		if err != nil {
			s.note("error: %v", err)
			status = 1
			if !interactive {
				return status
			}
		}
	}
}

// errQuit is a signal that ends the session while a command runs.
var errQuit = errors.New("ended by a signal")

// interruptible runs c; a ^C ends it early (a wait, a sleep), and another
// signal ends the session.
func (s *session) interruptible(c command, sigs <-chan os.Signal) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.execute(ctx, c) }()
	quit := false
	for {
		select {
		case err := <-done:
			if quit {
				return errQuit
			}
			return err
		case sig := <-sigs:
			s.note("%v: interrupting %s", sig, c.op)
			cancel()
			quit = quit || sig != os.Interrupt
		}
	}
}
