//go:build linux

package verbs

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"

	"golang.org/x/sys/unix"
)

// eventfdPoll makes a PollFD over a fresh eventfd, standing in for a C
// library's channel fd; the eventfd itself plays the library's fd, which
// the PollFD owns and closes.
func eventfdPoll(t testing.TB) (p *PollFD, fd int, try func() bool) {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	p, err = NewPollFD(fd, "eventfd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var b [8]byte
	try = func() bool {
		_, err := unix.Read(fd, b[:])
		return err != unix.EAGAIN
	}
	return p, fd, try
}

func signal(t testing.TB, fd int) {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], 1)
	if _, err := unix.Write(fd, b[:]); err != nil {
		t.Fatal(err)
	}
}

func TestPollFDWakesOnEvent(t *testing.T) {
	p, fd, try := eventfdPoll(t)
	done := make(chan error)
	procstat.StartParked(t, func() { done <- p.Wait(context.Background(), try) })
	signal(t, fd)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestPollFDDeadline(t *testing.T) {
	p, _, try := eventfdPoll(t)
	p.SetDeadline(time.Now().Add(20 * time.Millisecond))
	if err := p.Wait(context.Background(), try); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Wait = %v, want os.ErrDeadlineExceeded", err)
	}
	// A past deadline set from another goroutine wakes a waiter.
	p.SetDeadline(time.Time{})
	done := make(chan error)
	procstat.StartParked(t, func() { done <- p.Wait(context.Background(), try) })
	p.SetDeadline(time.Unix(1, 0))
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Wait = %v, want os.ErrDeadlineExceeded", err)
	}
}

func TestPollFDContext(t *testing.T) {
	p, fd, try := eventfdPoll(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	procstat.StartParked(t, func() { done <- p.Wait(ctx, try) })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.Wait(ctx, try); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want context.DeadlineExceeded", err)
	}
	// The context's deadline must not stick: a plain wait still works.
	signal(t, fd)
	if err := p.Wait(context.Background(), try); err != nil {
		t.Fatalf("Wait after context wait = %v", err)
	}
}

func TestPollFDCloseWakesWaiter(t *testing.T) {
	p, _, try := eventfdPoll(t)
	done := make(chan error)
	procstat.StartParked(t, func() { done <- p.Wait(context.Background(), try) })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Wait = %v, want net.ErrClosed", err)
	}
	if err := p.Wait(context.Background(), try); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Wait after Close = %v, want net.ErrClosed", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

// TestPollFDShutdownKeepsFD: Shutdown wakes waiters but leaves the fd open
// for the library (rdma_cm still writes its commands there); Close closes
// it, and the PollFD never held a second descriptor.
func TestPollFDShutdownKeepsFD(t *testing.T) {
	fds0 := procstat.OpenFDs(t)
	p, fd, try := eventfdPoll(t)
	if fds := procstat.OpenFDs(t); fds != fds0+1 {
		t.Errorf("a PollFD over one fd: %d fds open, want %d", fds, fds0+1)
	}
	done := make(chan error)
	procstat.StartParked(t, func() { done <- p.Wait(context.Background(), try) })
	p.Shutdown()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Wait = %v, want net.ErrClosed", err)
	}
	if err := p.SetDeadline(time.Time{}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("SetDeadline after Shutdown = %v, want net.ErrClosed", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		t.Errorf("fd after Shutdown: %v, want it open", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
		t.Errorf("fd after Close: %v, want EBADF", err)
	}
}

func TestPollFD1000WaitersFewThreads(t *testing.T) {
	const n = 1000
	var wg sync.WaitGroup
	polls := make([]*PollFD, n)
	errs := make(chan error, n)
	base := procstat.NetpollWaiters()
	for i := range polls {
		p, _, try := eventfdPoll(t)
		polls[i] = p
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- p.Wait(context.Background(), try)
		}()
	}
	procstat.WaitParked(t, base+n)
	if th := procstat.OSThreads(t); th >= procstat.ThreadLimit() {
		t.Errorf("%d goroutines parked use %d OS threads, want < %d", n, th, procstat.ThreadLimit())
	} else {
		t.Logf("%d parked goroutines, %d OS threads", n, th)
	}
	for _, p := range polls {
		p.Close()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("waiter got %v, want net.ErrClosed", err)
		}
	}
}
