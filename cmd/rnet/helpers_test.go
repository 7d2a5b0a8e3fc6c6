package main

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// child is the test binary run as the rnet command (see TestMain).
type child struct {
	cmd   *exec.Cmd
	addr  string // for servers: the address from "listening on ADDR"
	lines chan string
	done  chan error
	once  sync.Once
}

// startCmd starts `rnet args...` as a child and, for a server, waits for its
// "listening on" line.
func startCmd(t *testing.T, args ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(os.Args[0], args...), lines: make(chan string, 100), done: make(chan error, 1)}
	c.cmd.Env = append(os.Environ(), "RNET_CMD_AS_MAIN=1")
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stderr = os.Stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.done <- c.cmd.Wait()
	}()
	t.Cleanup(c.stop)
	for line := range c.lines {
		if _, rest, ok := strings.Cut(line, "listening on "); ok {
			c.addr, _, _ = strings.Cut(rest, " ")
			return c
		}
	}
	err = <-c.done
	c.done <- err // for the cleanup's stop, which waits for it too
	t.Fatalf("rnet %q exited without listening: %v", args, err)
	return nil
}

// wait waits for the child to exit on its own and returns the lines it
// printed after "listening on" and its exit status.
func (c *child) wait() (lines []string, err error) {
	c.once.Do(func() {
		for line := range c.lines {
			lines = append(lines, line)
		}
		err = <-c.done
	})
	return lines, err
}

// stop kills the child (if it still runs) and reaps it.
func (c *child) stop() {
	c.once.Do(func() {
		c.cmd.Process.Kill()
		for range c.lines {
		}
		<-c.done
	})
}

// refusingServer listens on TCP loopback until the test ends, reads hello
// bytes of its first connection and closes it without an answer, as a
// server that refuses a test does; it returns the address.
func refusingServer(t *testing.T, hello int) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.ReadFull(c, make([]byte, hello))
		c.Close()
	}()
	return ln.Addr().String()
}
