package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/rnet-dev/rnet/internal/hostlab"
)

// session runs the commands of one lab.
type session struct {
	lab   *hostlab.Lab
	out   *printer
	start time.Time // when both hosts were up; driver lines count from it

	mu   sync.Mutex // guards jobs
	jobs []*job     // every job started, in order
}

// job is a command started on a host.
type job struct {
	name string // host and number: a1, b2
	host string
	line string
	j    *hostlab.Job
	// reported is closed once the job's end has been printed, so that a
	// wait returns after it.
	reported chan struct{}
}

// printer writes whole lines from the jobs' goroutines and the session's,
// one at a time.
type printer struct {
	mu sync.Mutex // serialises writes
	w  io.Writer
}

func (p *printer) line(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// note writes a line of the driver's own, stamped with the time since the
// hosts came up.
func (s *session) note(format string, args ...any) {
	s.out.line("== %6.1fs "+format, append([]any{time.Since(s.start).Seconds()}, args...)...)
}

func (s *session) host(name string) *hostlab.Host {
	if name == "a" {
		return s.lab.A
	}
	return s.lab.B
}

// execute runs one command; ctx ends a command that waits (wait, expect,
// sleep, reboot) early.
func (s *session) execute(ctx context.Context, c command) error {
	switch c.op {
	case "run":
		return s.run(c.host, c.text)
	case "wait":
		return s.wait(ctx, c.host, c.job, c.dur)
	case "expect":
		return s.expect(ctx, c.host, c.text)
	case "kill":
		var errs []error
		jobs, err := s.running(c.host, c.job)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			if err := j.j.Signal(c.sig); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", j.name, err))
			}
		}
		return errors.Join(errs...)
	case "sleep":
		select {
		case <-time.After(c.dur):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	case "cut":
		return s.wireDone(c.wire, s.lab.Wire(c.wire).Cut(), "cut: the relay drops every frame, both ways")
	case "cutroce":
		return s.wireDone(c.wire, s.lab.Wire(c.wire).CutRoCE(), "cut for RoCE: the relay drops RoCE v2 frames, both ways, and forwards the rest")
	case "restore":
		return s.wireDone(c.wire, s.lab.Wire(c.wire).Restore(), "restored")
	case "delay":
		return s.wireDone(c.wire, s.lab.Wire(c.wire).SetDelay(c.dur), "delays each frame by "+c.dur.String())
	case "loss":
		return s.wireDone(c.wire, s.lab.Wire(c.wire).SetLoss(c.frac), fmt.Sprintf("drops each frame with probability %v", c.frac))
	case "counts":
		wires := c.wires
		if len(wires) == 0 {
			for i := range s.lab.Wires() {
				wires = append(wires, i)
			}
		}
		for _, i := range wires {
			fwd, dropped := s.lab.Wire(i).Counts()
			s.note("wire %d: %d frames forwarded, %d dropped", i, fwd, dropped)
		}
		return nil
	case "linkdown":
		return s.hostDone(c.host, s.host(c.host).LinkDown(c.wire), fmt.Sprintf("NIC on wire %d down (no carrier)", c.wire))
	case "linkup":
		return s.hostDone(c.host, s.host(c.host).LinkUp(c.wire), fmt.Sprintf("NIC on wire %d up", c.wire))
	case "poweroff":
		return s.hostDone(c.host, s.host(c.host).PowerOff(), "powered off")
	case "freeze":
		return s.hostDone(c.host, s.host(c.host).Freeze(), "frozen")
	case "thaw":
		return s.hostDone(c.host, s.host(c.host).Thaw(), "thawed")
	case "reboot":
		s.note("host %s: rebooting", c.host)
		t := time.Now()
		if err := s.host(c.host).Reboot(ctx); err != nil {
			return err
		}
		s.note("host %s: up again after %.1fs", c.host, time.Since(t).Seconds())
		return nil
	case "help":
		s.out.line("%s", commandsHelp)
		return nil
	}
	return fmt.Errorf("command %q not implemented", c.op)
}

func (s *session) wireDone(i int, err error, what string) error {
	if err != nil {
		return err
	}
	s.note("wire %d: %s", i, what)
	return nil
}

func (s *session) hostDone(name string, err error, what string) error {
	if err != nil {
		return fmt.Errorf("host %s: %w", name, err)
	}
	s.note("host %s: %s", name, what)
	return nil
}

// run starts line on host name under bash, so that the hosts' variables
// ($RNET_PEER_ADDR0) and shell syntax work, and reports its exit.
func (s *session) run(name, line string) error {
	s.mu.Lock()
	n := 1
	for _, j := range s.jobs {
		if j.host == name {
			n++
		}
	}
	jb := &job{name: fmt.Sprintf("%s%d", name, n), host: name, line: line, reported: make(chan struct{})}
	s.mu.Unlock()
	hj, err := s.host(name).Start(nil, func(l string) { s.out.line("%s: %s", jb.name, l) }, "bash", "-c", line)
	if err != nil {
		return err
	}
	jb.j = hj
	s.mu.Lock()
	s.jobs = append(s.jobs, jb)
	s.mu.Unlock()
	s.note("%s: started: %s", jb.name, line)
	go func() {
		defer close(jb.reported)
		err := hj.Wait(context.Background())
		switch {
		case errors.Is(err, hostlab.ErrPoweredOff):
			s.note("%s: ended with its host (powered off or rebooted)", jb.name)
		default:
			s.note("%s: exited %d", jb.name, hj.ExitCode())
		}
	}()
	return nil
}

// running returns the jobs of host name ("" for both), or the job named
// jobName, that have not ended.
func (s *session) running(name, jobName string) ([]*job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r []*job
	found := false
	for _, j := range s.jobs {
		if (name != "" && j.host != name) || (jobName != "" && j.name != jobName) {
			continue
		}
		found = true
		select {
		case <-j.reported:
		default:
			r = append(r, j)
		}
	}
	if jobName != "" && !found {
		return nil, fmt.Errorf("no job %s", jobName)
	}
	return r, nil
}

// wait waits for the jobs of host name ("" for both), or the job named
// jobName, to end and their ends to be printed, at most limit if it is not 0.
func (s *session) wait(ctx context.Context, name, jobName string, limit time.Duration) error {
	if limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	jobs, err := s.running(name, jobName)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		select {
		case <-j.reported:
		case <-ctx.Done():
			var left []string
			still, _ := s.running(name, jobName)
			for _, j := range still {
				left = append(left, j.name+" ("+j.line+")")
			}
			return fmt.Errorf("wait: %w; still running: %s", ctx.Err(), strings.Join(left, ", "))
		}
	}
	return nil
}

// expect waits until host name's last job prints a line containing text.
func (s *session) expect(ctx context.Context, name, text string) error {
	s.mu.Lock()
	var last *job
	for _, j := range s.jobs {
		if j.host == name {
			last = j
		}
	}
	s.mu.Unlock()
	if last == nil {
		return fmt.Errorf("expect: host %s has run no job", name)
	}
	if _, err := last.j.WaitFor(ctx, text); err != nil {
		return fmt.Errorf("expect: %s: %w", last.name, err)
	}
	return nil
}
