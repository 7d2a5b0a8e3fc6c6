package main

// The exec server and its runner start a benchmark's servers on another host
// (-server-exec): the exec server listens on that host's address
// (-exec-listen), and a runner (-exec-on) sends it a command line, prints
// the command's output as it comes and exits with its exit code. The command
// is killed when the runner's connection closes, so killing the runner, as
// rnet-benchreport kills a server it no longer needs, kills the command.
//
// It runs whatever it is sent: listen only on a private network, such as
// the two-host lab's wire. TCP keepalives are off on both ends, so that an
// idle connection sends nothing while a benchmark measures.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// execRequest is what a runner sends, as one JSON line.
type execRequest struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"` // NAME=value, added to the exec server's environment
}

// The exec server answers in frames: a kind byte, a 4-byte big-endian
// length, the payload.
const (
	frameOutput = 'o' // a piece of the command's output (stdout and stderr merged)
	frameExit   = 'x' // the command's exit code, in decimal; the last frame
)

const (
	maxExecRequest = 1 << 20   // bytes of a request line
	maxFrame       = 256 << 10 // bytes of a frame's payload, which a runner accepts
	requestTimeout = 30 * time.Second
)

// serveExec runs the exec server on addr until ln fails; ready, if not nil,
// is called with the bound address once it listens.
func serveExec(addr string, ready func(net.Addr)) error {
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return fmt.Errorf("exec server: %w", err)
	}
	defer ln.Close()
	if ready != nil {
		ready(ln.Addr())
	}
	for {
		conn, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("exec server on %s: %w", addr, err)
		}
		go serveExecConn(conn)
	}
}

// serveExecConn runs one runner's command to its end, or until the runner
// goes away.
func serveExecConn(conn net.Conn) {
	defer conn.Close()
	fw := &frameWriter{w: conn}
	conn.SetReadDeadline(time.Now().Add(requestTimeout))
	br := bufio.NewReaderSize(conn, 4096)
	line, err := readLimitedLine(br, maxExecRequest)
	var req execRequest
	if err == nil {
		err = json.Unmarshal(line, &req)
	}
	if err == nil && len(req.Argv) == 0 {
		err = errors.New("no command")
	}
	if err != nil {
		fw.write(frameOutput, []byte(fmt.Sprintf("exec server: bad request from %s: %v\n", conn.RemoteAddr(), err)))
		fw.write(frameExit, []byte("126"))
		return
	}
	conn.SetReadDeadline(time.Time{})
	code := runExec(req, fw, br)
	fw.write(frameExit, []byte(strconv.Itoa(code)))
}

// runExec runs req's command with its output sent as frames, and kills it
// (its whole process group) as soon as the runner's side of the connection
// (gone) reads anything or ends. It returns the exit code: 128+N if signal
// N ended the command, 127 if it could not start.
func runExec(req execRequest, fw *frameWriter, gone io.Reader) int {
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	cmd.Env = append(os.Environ(), req.Env...) // the last of a repeated name wins
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw, err := os.Pipe()
	if err != nil {
		fw.write(frameOutput, []byte("exec server: "+err.Error()+"\n"))
		return 127
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		fw.write(frameOutput, []byte(fmt.Sprintf("exec server: %v\n", err)))
		return 127
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 32<<10)
		for {
			n, err := pr.Read(buf)
			if n > 0 {
				fw.write(frameOutput, buf[:n])
			}
			if err != nil {
				pr.Close()
				return
			}
		}
	}()
	exited := make(chan struct{})
	go func() {
		// A runner sends nothing after its request: any byte, or the end
		// of the connection, means it is gone.
		var b [1]byte
		gone.Read(b[:])
		select {
		case <-exited:
		default:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
	err = cmd.Wait()
	close(exited)
	// What the command left behind in its group dies with it, or it would
	// hold the output open and the exit frame back.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-copied // every byte of output goes before the exit frame
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 127
}

// frameWriter writes frames from several goroutines, one whole frame at a
// time; after a write fails it writes nothing more.
type frameWriter struct {
	mu     sync.Mutex // guards w's writes and failed
	w      io.Writer
	failed bool
}

func (f *frameWriter) write(kind byte, payload []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(payload) > 0 || kind == frameExit {
		n := min(len(payload), maxFrame)
		hdr := [5]byte{kind}
		binary.BigEndian.PutUint32(hdr[1:], uint32(n))
		if f.failed {
			return
		}
		if _, err := f.w.Write(append(hdr[:], payload[:n]...)); err != nil {
			f.failed = true
			return
		}
		payload = payload[n:]
		if kind == frameExit {
			return
		}
	}
}

func readLimitedLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > limit {
			return nil, fmt.Errorf("request longer than %d bytes", limit)
		}
		if err == nil {
			return line, nil
		}
		if err != bufio.ErrBufferFull {
			return nil, err
		}
	}
}

// execOn runs argv with env on the exec server at addr, copies its output to
// out and returns its exit code.
func execOn(ctx context.Context, addr string, env, argv []string, out io.Writer) (int, error) {
	d := net.Dialer{KeepAlive: -1, Timeout: 30 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, fmt.Errorf("exec server %s: %w (is rnet-benchreport -exec-listen running there?)", addr, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	req, err := json.Marshal(execRequest{Argv: argv, Env: env})
	if err != nil {
		return 0, err
	}
	if _, err := conn.Write(append(req, '\n')); err != nil {
		return 0, fmt.Errorf("exec server %s: sending the command: %w", addr, err)
	}
	br := bufio.NewReader(conn)
	var hdr [5]byte
	buf := make([]byte, maxFrame)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return 0, fmt.Errorf("exec server %s: connection ended before %s's exit code: %w", addr, argv[0], err)
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > maxFrame {
			return 0, fmt.Errorf("exec server %s: frame of %d bytes; at most %d", addr, n, maxFrame)
		}
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			return 0, fmt.Errorf("exec server %s: connection ended in a frame: %w", addr, err)
		}
		switch hdr[0] {
		case frameOutput:
			out.Write(buf[:n])
		case frameExit:
			code, err := strconv.Atoi(string(buf[:n]))
			if err != nil {
				return 0, fmt.Errorf("exec server %s: exit code %q", addr, buf[:n])
			}
			return code, nil
		default:
			return 0, fmt.Errorf("exec server %s: frame kind %q", addr, hdr[0])
		}
	}
}
