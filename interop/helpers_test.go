//go:build linux && cgo

package interop

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/rnet"
)

// need returns the path of a host program the test drives, or skips (fails
// under RNET_REQUIRE_RDMA=1, where the lab promises it: see host-setup.sh).
func need(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if rdmatest.Required() {
			t.Fatalf("%s not found (scripts/softroce/host-setup.sh installs it): %v", name, err)
		}
		t.Skipf("%s not found: %v", name, err)
	}
	return p
}

// rspreload returns the path of librdmacm's preload library.
func rspreload(t *testing.T) string {
	t.Helper()
	for _, pat := range []string{
		"/usr/lib/*/rsocket/librspreload.so",
		"/usr/lib/rsocket/librspreload.so",
		"/usr/lib64/rsocket/librspreload.so",
	} {
		if m, _ := filepath.Glob(pat); len(m) > 0 {
			return m[0]
		}
	}
	if rdmatest.Required() {
		t.Fatal("librspreload.so not found (package librdmacm1)")
	}
	t.Skip("librspreload.so not found")
	return ""
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proc is a C peer running in the background.
type proc struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	err  error
}

// start runs name with args; env entries are added to the environment. The
// process is killed when timeout passes or the test ends.
func start(t *testing.T, timeout time.Duration, env []string, name string, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	p := &proc{cmd: cmd, out: &lockedBuffer{}, done: make(chan struct{})}
	if cmd.Stdout == nil {
		cmd.Stdout = p.out
	}
	cmd.Stderr = p.out
	t.Logf("run: %v %s %v", env, name, args)
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		cancel()
		close(p.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

// startWith is start with the caller's stdin and stdout (files).
func startWith(t *testing.T, timeout time.Duration, env []string, stdin, stdout *os.File, name string, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin, cmd.Stdout = stdin, stdout
	p := &proc{cmd: cmd, out: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.out
	t.Logf("run: %v %s %v", env, name, args)
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		cancel()
		close(p.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process and fails the test unless it exited with 0.
func (p *proc) wait(t *testing.T) string {
	t.Helper()
	<-p.done
	out := p.out.String()
	if p.err != nil {
		t.Fatalf("%s: %v (exit code %d); output:\n%s", p.cmd.Path, p.err, p.cmd.ProcessState.ExitCode(), out)
	}
	return out
}

// listen starts an rnet listener on the server address with a kernel-chosen port.
func listen(t *testing.T, server netip.Addr, cfg *rnet.Config) (*rnet.Listener, netip.AddrPort) {
	t.Helper()
	ln, err := (&rnet.ListenConfig{Config: withResume(cfg)}).Listen(context.Background(), "rdma", net.JoinHostPort(server.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ap, err := netip.ParseAddrPort(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return ln, ap
}

// accept waits for a connection, or fails the test if the C peer exits first.
func accept(t *testing.T, ln *rnet.Listener, peer *proc) *rnet.Conn {
	t.Helper()
	type res struct {
		c   *rnet.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.AcceptRDMA()
		ch <- res{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		checkNoResume(t, r.c)
		return r.c
	case <-peer.done:
		ln.Close()
		if r := <-ch; r.c != nil {
			r.c.Close()
		}
		t.Fatalf("peer exited before connecting: %v; output:\n%s", peer.err, peer.out.String())
		return nil
	}
}

// dialPeer connects to a C server that may not be listening yet: it retries
// while the connection is refused and the server process is still running,
// for at most 60 s. A successful connect is the real connection.
func dialPeer(t *testing.T, d *rnet.Dialer, addr netip.AddrPort, peer *proc) *rnet.Conn {
	t.Helper()
	end := time.Now().Add(60 * time.Second)
	for {
		c, err := d.Dial("rdma", addr.String())
		if err == nil {
			checkNoResume(t, c)
			return c
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || peer.exited() || time.Now().After(end) {
			t.Fatalf("dial %v: %v; peer output:\n%s", addr, err, peer.out.String())
		}
		// Refused: the peer has not called listen yet. Wait for it to
		// make progress (or exit) before the next attempt.
		select {
		case <-peer.done:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// freePort picks a port nobody listens on for RDMA at addr: an rnet listener
// is bound on port 0 and closed, and its port is handed to a C server.
func freePort(t *testing.T, addr netip.Addr) netip.AddrPort {
	t.Helper()
	ln, ap := listen(t, addr, nil)
	ln.Close()
	return ap
}
