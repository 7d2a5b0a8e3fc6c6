package main

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// command is one parsed line of the session.
type command struct {
	op    string        // the command's name: "run", "wait", "cut", ...
	host  string        // "a" or "b", for run and the host commands; "" for both in wait
	job   string        // one job (a1, b2) for wait and kill; "" for all of host's
	wire  int           // the wire index, for the wire and link commands
	dur   time.Duration // sleep's, delay's, and wait's or expect's bound (0: none)
	frac  float64       // loss's probability
	sig   syscall.Signal
	text  string // run's shell command line, expect's text
	wires []int  // counts' wires; all when empty
}

// commandsHelp is the command list, for the usage text and "help".
const commandsHelp = `Commands (one per line; # starts a comment):
  a CMD...             run the shell command line CMD on host a in the background
  b CMD...             the same on host b; each output line is prefixed with the
                       job's name (a1, b2, ...), and its exit is reported
  wait [HOST|JOB] [DUR]
                       wait for the jobs (of HOST, or JOB) to exit; fail after DUR
  expect HOST TEXT     wait until HOST's last job prints a line containing TEXT
  kill HOST|JOB [SIG]  send SIG (default TERM) to HOST's running jobs, or JOB
  sleep DUR            pause the session (DUR as 2s, 500ms)
  cut N                the relay drops every frame on wire N, both ways, silently
  cutroce N            the relay drops wire N's RoCE v2 frames (UDP 4791) alone
  restore N            end wire N's cut
  delay N DUR          the relay delays each frame on wire N by DUR (0 for none)
  loss N FRACTION      the relay drops each frame on wire N with this probability
  counts [N...]        the frames the relay forwarded and dropped on wire N (all)
  linkdown HOST N      take HOST's NIC on wire N down: its kernel sees no carrier
  linkup HOST N        put it back up
  poweroff HOST        kill HOST's qemu: no goodbye to any peer
  freeze HOST          stop HOST's qemu (SIGSTOP): CPUs, clock and NICs stop
  thaw HOST            resume it (SIGCONT)
  reboot HOST          power HOST off and boot it again (same wires and addresses)
  help                 this list
  quit                 power both hosts off and exit (as does the end of input)
Wires are numbered from 0; hosts are a and b.`

// parseCommand parses one line of the session for a lab of wires wires. A
// blank line or a comment gives op "".
func parseCommand(line string, wires int) (command, error) {
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return command{}, nil
	}
	name, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	args := strings.Fields(rest)
	c := command{op: name}
	var err error
	switch name {
	case "a", "b":
		if rest == "" {
			return c, fmt.Errorf("%s: no command to run", name)
		}
		c.op, c.host, c.text = "run", name, rest
	case "wait":
		if len(args) > 2 {
			return c, fmt.Errorf("wait: want [HOST] [DURATION], got %q", rest)
		}
		for _, a := range args {
			if host, job, ok := parseTarget(a); ok {
				c.host, c.job = host, job
				continue
			}
			if c.dur, err = time.ParseDuration(a); err != nil || c.dur < 0 {
				return c, fmt.Errorf("wait: %q is neither a host (a, b), a job (a1, b2) nor a duration (such as 30s)", a)
			}
		}
	case "expect":
		host, text, _ := strings.Cut(rest, " ")
		if c.host, err = parseHost(name, host); err != nil {
			return c, err
		}
		if c.text = strings.TrimSpace(text); c.text == "" {
			return c, fmt.Errorf("expect: want HOST TEXT, got %q", rest)
		}
	case "kill":
		if len(args) < 1 || len(args) > 2 {
			return c, fmt.Errorf("kill: want HOST|JOB [SIGNAL], got %q", rest)
		}
		var ok bool
		if c.host, c.job, ok = parseTarget(args[0]); !ok {
			return c, fmt.Errorf("kill: %q is neither a host (a, b) nor a job (a1, b2)", args[0])
		}
		c.sig = syscall.SIGTERM
		if len(args) == 2 {
			if c.sig, err = parseSignal(args[1]); err != nil {
				return c, err
			}
		}
	case "sleep":
		if err := wantArgs(name, args, 1, "DURATION"); err != nil {
			return c, err
		}
		if c.dur, err = parseDuration(name, args[0]); err != nil {
			return c, err
		}
	case "cut", "cutroce", "restore":
		if err := wantArgs(name, args, 1, "WIRE"); err != nil {
			return c, err
		}
		c.wire, err = parseWire(name, args[0], wires)
		return c, err
	case "delay":
		if err := wantArgs(name, args, 2, "WIRE DURATION"); err != nil {
			return c, err
		}
		if c.wire, err = parseWire(name, args[0], wires); err != nil {
			return c, err
		}
		c.dur, err = parseDuration(name, args[1])
		return c, err
	case "loss":
		if err := wantArgs(name, args, 2, "WIRE FRACTION"); err != nil {
			return c, err
		}
		if c.wire, err = parseWire(name, args[0], wires); err != nil {
			return c, err
		}
		c.frac, err = strconv.ParseFloat(args[1], 64)
		if err != nil || c.frac < 0 || c.frac > 1 {
			return c, fmt.Errorf("loss: fraction %q; want 0 to 1, such as 0.01", args[1])
		}
	case "counts":
		for _, a := range args {
			w, err := parseWire(name, a, wires)
			if err != nil {
				return c, err
			}
			c.wires = append(c.wires, w)
		}
	case "linkdown", "linkup":
		if err := wantArgs(name, args, 2, "HOST WIRE"); err != nil {
			return c, err
		}
		if c.host, err = parseHost(name, args[0]); err != nil {
			return c, err
		}
		c.wire, err = parseWire(name, args[1], wires)
		return c, err
	case "poweroff", "freeze", "thaw", "reboot":
		if err := wantArgs(name, args, 1, "HOST"); err != nil {
			return c, err
		}
		c.host, err = parseHost(name, args[0])
		return c, err
	case "help", "quit":
		if len(args) != 0 {
			return c, fmt.Errorf("%s takes no arguments", name)
		}
	default:
		return c, fmt.Errorf("unknown command %q (help lists them)", name)
	}
	return c, nil
}

func wantArgs(name string, args []string, n int, want string) error {
	if len(args) != n {
		return fmt.Errorf("%s: want %s, got %q", name, want, strings.Join(args, " "))
	}
	return nil
}

func parseHost(cmd, s string) (string, error) {
	if s != "a" && s != "b" {
		return "", fmt.Errorf("%s: host %q; want a or b", cmd, s)
	}
	return s, nil
}

// parseTarget takes a host (a, b) or a job's name (a1, b2).
func parseTarget(s string) (host, job string, ok bool) {
	if s == "a" || s == "b" {
		return s, "", true
	}
	if len(s) < 2 || (s[0] != 'a' && s[0] != 'b') || s[1] == '0' {
		return "", "", false
	}
	if _, err := strconv.ParseUint(s[1:], 10, 31); err != nil {
		return "", "", false
	}
	return s[:1], s, true
}

func parseWire(cmd, s string, wires int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s: wire %q; want a number from 0", cmd, s)
	}
	if n >= wires {
		return 0, fmt.Errorf("%s: wire %d, but the lab has %d (-wires sets more)", cmd, n, wires)
	}
	return n, nil
}

func parseDuration(cmd, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s: duration %q; want one such as 2s or 500ms", cmd, s)
	}
	return d, nil
}

// parseSignal takes a signal's name, with or without SIG, or its number.
func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("kill: signal %q; want a name such as TERM or INT, or a number", s)
}
