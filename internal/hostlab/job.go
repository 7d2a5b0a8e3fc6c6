package hostlab

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// controlWriteTimeout bounds a write to a host's control port, which a
// frozen host does not drain, so that it cannot hold the host's lock for
// good.
const controlWriteTimeout = 10 * time.Second

// Job is a command running on a host.
type Job struct {
	host *Host
	id   int
	argv []string
	ctl  net.Conn // the control port of the boot it runs in

	mu      sync.Mutex // guards the fields below
	out     strings.Builder
	code    int
	err     error
	done    chan struct{} // closed when the command has exited or its host has gone
	waiters []*lineWaiter // WaitFor calls waiting for a line
	lines   func(string)  // each line as it comes, if set
}

type lineWaiter struct {
	substr string
	found  chan string
}

// Start starts argv on the host, in the lab's directory, with env (NAME=value
// entries) added to the host's environment. Its output (stdout and stderr
// merged) is kept, line by line, each cut to 3000 bytes; onLine, if not nil,
// also receives each line as it comes, on the goroutine that reads all the
// host's jobs, so it must not block.
func (h *Host) Start(env []string, onLine func(line string), argv ...string) (*Job, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("hostlab: host %s: no command", h.Name)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctl == nil {
		return nil, fmt.Errorf("hostlab: host %s is not running", h.Name)
	}
	h.nextID++
	j := &Job{host: h, id: h.nextID, argv: argv, ctl: h.ctl, done: make(chan struct{}), lines: onLine}
	var script strings.Builder
	for _, e := range env {
		name, value, ok := strings.Cut(e, "=")
		if !ok {
			return nil, fmt.Errorf("hostlab: environment entry %q has no =", e)
		}
		fmt.Fprintf(&script, "export %s=%s\n", name, shellQuote(value))
	}
	fmt.Fprintf(&script, "cd %s || exit 126\nexec", shellQuote(h.lab.cfg.Dir))
	for _, a := range argv {
		script.WriteString(" " + shellQuote(a))
	}
	script.WriteString("\n")
	if err := os.WriteFile(filepath.Join(h.run, "jobs", strconv.Itoa(j.id)), []byte(script.String()), 0o644); err != nil {
		return nil, err
	}
	h.jobs[j.id] = j
	h.ctl.SetWriteDeadline(time.Now().Add(controlWriteTimeout))
	if _, err := fmt.Fprintf(h.ctl, "run %d\n", j.id); err != nil {
		delete(h.jobs, j.id)
		return nil, fmt.Errorf("hostlab: host %s: sending the command: %w", h.Name, err)
	}
	return j, nil
}

// Run runs argv on the host to its end and returns its output; a non-zero
// exit is an error that quotes the output's tail.
func (h *Host) Run(ctx context.Context, env []string, argv ...string) (string, error) {
	j, err := h.Start(env, nil, argv...)
	if err != nil {
		return "", err
	}
	err = j.Wait(ctx)
	return j.Output(), err
}

// Wait waits for the command to exit. A non-zero exit, a host powered off
// under it and ctx's end (which also kills it) are errors.
func (j *Job) Wait(ctx context.Context) error {
	select {
	case <-j.done:
	case <-ctx.Done():
		j.Signal(syscall.SIGKILL)
		return fmt.Errorf("hostlab: host %s: %s: %w", j.host.Name, j.argv[0], ctx.Err())
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return fmt.Errorf("hostlab: host %s: %s: %w", j.host.Name, j.argv[0], j.err)
	}
	if j.code != 0 {
		return fmt.Errorf("hostlab: host %s: %s exited %d:\n%s", j.host.Name, j.argv[0], j.code, tail(j.out.String(), 30))
	}
	return nil
}

// Done is closed when the command has exited or its host has gone.
func (j *Job) Done() <-chan struct{} { return j.done }

// WaitFor waits until a line of the output contains substr and returns that
// line. It fails if the command ends first or ctx ends.
func (j *Job) WaitFor(ctx context.Context, substr string) (string, error) {
	j.mu.Lock()
	for _, l := range strings.Split(j.out.String(), "\n") {
		if strings.Contains(l, substr) {
			j.mu.Unlock()
			return l, nil
		}
	}
	w := &lineWaiter{substr: substr, found: make(chan string, 1)}
	j.waiters = append(j.waiters, w)
	j.mu.Unlock()
	select {
	case l := <-w.found:
		return l, nil
	case <-j.done:
		select {
		case l := <-w.found:
			return l, nil
		default:
		}
		return "", fmt.Errorf("hostlab: host %s: %s ended before printing %q:\n%s", j.host.Name, j.argv[0], substr, tail(j.Output(), 30))
	case <-ctx.Done():
		return "", fmt.Errorf("hostlab: host %s: %s did not print %q: %w:\n%s", j.host.Name, j.argv[0], substr, ctx.Err(), tail(j.Output(), 30))
	}
}

// Signal sends sig to the command.
func (j *Job) Signal(sig syscall.Signal) error {
	h := j.host
	h.mu.Lock() // one writer on the control port at a time
	defer h.mu.Unlock()
	select {
	case <-j.done:
		return nil
	default:
	}
	j.ctl.SetWriteDeadline(time.Now().Add(controlWriteTimeout))
	_, err := fmt.Fprintf(j.ctl, "signal %d %s\n", j.id, unix.SignalName(sig))
	return err
}

// Output is what the command has printed so far.
func (j *Job) Output() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.out.String()
}

// ExitCode is the command's exit status once Done is closed; -1 if its host
// went away under it.
func (j *Job) ExitCode() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.code
}

func (j *Job) addLine(line string) {
	j.mu.Lock()
	j.out.WriteString(line + "\n")
	keep := j.waiters[:0]
	for _, w := range j.waiters {
		if strings.Contains(line, w.substr) {
			w.found <- line
		} else {
			keep = append(keep, w)
		}
	}
	j.waiters = keep
	f := j.lines
	j.mu.Unlock()
	if f != nil {
		f(line)
	}
}

func (j *Job) finish(code int, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	select {
	case <-j.done:
		return
	default:
	}
	j.code, j.err = code, err
	close(j.done)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
