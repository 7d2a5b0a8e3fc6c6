package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// proc is a started server process whose output is kept.
type proc struct {
	cmd  *exec.Cmd
	out  strings.Builder
	done chan error
}

// serveWhile starts the server argv (see startServer), runs client while it
// serves and then waits for the server to exit; if client fails, it kills
// the server and returns client's error.
func serveWhile(ctx context.Context, c *config, ready string, env []string, argv []string, client func(srv *proc) error) error {
	srv, err := startServer(ctx, c, ready, env, argv...)
	if err != nil {
		return err
	}
	if err := client(srv); err != nil {
		srv.kill()
		srv.wait()
		return err
	}
	return srv.wait()
}

// startServer starts argv and, if ready is not empty, waits until a line of
// its stdout contains ready.
func startServer(ctx context.Context, c *config, ready string, env []string, argv ...string) (*proc, error) {
	env, argv = serverCommand(c, env, argv)
	p := &proc{cmd: command(ctx, env, argv), done: make(chan error, 1)}
	if c.verbose {
		fmt.Fprintln(os.Stderr, "   $", strings.Join(append(env, argv...), " "), "&")
	}
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	seen := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			p.out.WriteString(sc.Text() + "\n")
			if !once && ready != "" && strings.Contains(sc.Text(), ready) {
				once = true
				close(seen)
			}
		}
		if !once {
			close(seen)
		}
	}()
	go func() { err := p.cmd.Wait(); pw.Close(); p.done <- err }()
	if ready != "" {
		<-seen
		if !strings.Contains(p.out.String(), ready) {
			return nil, fmt.Errorf("%s exited before it was ready: %s", argv[0], strings.TrimSpace(p.out.String()))
		}
	}
	return p, nil
}

// running reports whether the server has not exited yet.
func (p *proc) running() bool {
	select {
	case err := <-p.done:
		p.done <- err // keep it for wait
		return false
	default:
		return true
	}
}

func (p *proc) wait() error {
	err := <-p.done
	if err != nil {
		return fmt.Errorf("server %s: %v: %s", p.cmd.Args[0], err, strings.TrimSpace(p.out.String()))
	}
	return nil
}

func (p *proc) kill() {
	if p.cmd.Process != nil {
		p.cmd.Process.Kill()
	}
}

// remoteEnv are the variables of this process's environment that a server
// started through -server-exec gets too: rnet's Config (see cmd/rnet),
// which a server on another host would not otherwise see.
var remoteEnv = []string{"RNET_BUFFER_SIZE", "RNET_BUSY_POLL", "RNET_BUSY_POLL_LIMIT", "RNET_ACK_TIMEOUT"}

// serverCommand is how a server's argv with env runs: as it is, or with
// -server-exec, as the arguments of that command, after remoteEnv's and
// env's NAME=value entries (as env(1) and a remote shell take them).
func serverCommand(c *config, env, argv []string) ([]string, []string) {
	if len(c.serverExec) == 0 {
		return env, argv
	}
	remote := slices.Clone(c.serverExec)
	for _, name := range remoteEnv {
		if v, ok := os.LookupEnv(name); ok {
			remote = append(remote, name+"="+v)
		}
	}
	return nil, slices.Concat(remote, env, argv)
}

// command is argv with env added to this process's environment.
func command(ctx context.Context, env, argv []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...) // the last of a repeated key wins
	}
	return cmd
}

func runClient(ctx context.Context, c *config, env []string, argv ...string) (string, error) {
	out, _, err := runClientCounted(ctx, c, env, argv...)
	return out, err
}

// runClientCounted is runClient that also returns how many system calls the
// client made in all (NaN where that cannot be counted): on rxe every post
// to the device (a doorbell), every arming of a CQ and every wait on a
// channel is one, while polling is not.
func runClientCounted(ctx context.Context, c *config, env []string, argv ...string) (string, float64, error) {
	if c.verbose {
		fmt.Fprintln(os.Stderr, "   $", strings.Join(append(env, argv...), " "))
	}
	cmd := command(ctx, env, argv)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	var lines *segmentsAtLines
	if len(c.serverExec) > 0 {
		lines = &segmentsAtLines{out: &out, before: tcpSegments(), atLast: math.NaN()}
		cmd.Stdout, cmd.Stderr = lines, lines
	}
	syscalls, err := runCounted(cmd)
	if lines != nil {
		c.clientTCPSegments = lines.atLast - lines.before
	}
	if c.verbose {
		fmt.Fprint(os.Stderr, out.String())
	}
	if err != nil {
		return out.String(), syscalls, fmt.Errorf("%s: %v: %s", argv[0], err, strings.TrimSpace(out.String()))
	}
	return out.String(), syscalls, nil
}

// clientRetrying runs a C tool's client until it connects: those servers say
// nothing when they are listening, so the client's refusal is the only sign.
// Each retry waits for a failed connect, not a fixed time.
// With serverUp, any failure is retried while the server still runs
// (rstream's client reports a connect that raced the server's listen as an
// rpoll error); otherwise only refusals are.
func clientRetrying(ctx context.Context, c *config, ok func(string) bool, serverUp func() bool, argv ...string) (string, error) {
	out, _, err := clientRetryingCounted(ctx, c, ok, serverUp, argv...)
	return out, err
}

// clientRetryingCounted is clientRetrying that also returns the system
// calls of the attempt that connected (see runClientCounted).
func clientRetryingCounted(ctx context.Context, c *config, ok func(string) bool, serverUp func() bool, argv ...string) (string, float64, error) {
	var last error
	for attempt := 0; attempt < 50 && ctx.Err() == nil; attempt++ {
		out, syscalls, err := runClientCounted(ctx, c, nil, argv...)
		if err == nil && ok(out) {
			return out, syscalls, nil
		}
		if err == nil {
			err = fmt.Errorf("%s printed no result: %s", argv[0], strings.TrimSpace(out))
		}
		last = err
		if !refused(out) && (serverUp == nil || !serverUp()) {
			return out, math.NaN(), err
		}
		select { // a refused connect returns at once: pace the retries
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return "", math.NaN(), fmt.Errorf("gave up connecting: %w", last)
}

func refused(out string) bool {
	for _, s := range []string{"refused", "Couldn't connect", "Unable to", "rconnect", "Failed to", "rejected"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}

// segmentsAtLines keeps a client's output and, at the end of each line it
// prints, notes this host's TCP segment count (tcpSegments). The clients
// print their result as their last line, when their timed part is over, so
// the count at the last line less the count before the client started is
// the TCP traffic while it measured: the server's own report and exit,
// which the end of the measurement causes, come after it (or race it).
// exec calls Write from one goroutine, and Wait returns after its last.
type segmentsAtLines struct {
	out            *bytes.Buffer
	before, atLast float64
}

func (l *segmentsAtLines) Write(p []byte) (int, error) {
	n, err := l.out.Write(p)
	if bytes.IndexByte(p, '\n') >= 0 {
		l.atLast = tcpSegments()
	}
	return n, err
}
