package rnet

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/nettest"
)

// pipeMaker makes a connected pair; each transport (simulated, rxe) has one.
type pipeMaker func(t *testing.T) (c1, c2 *Conn)

func testNettest(t *testing.T, mk pipeMaker) {
	nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
		c1, c2 := mk(t)
		return c1, c2, func() { c1.Close(); c2.Close() }, nil
	})
}

// testContract checks the *net.TCPConn behaviours users and libraries rely on
// beyond what nettest covers.
func testContract(t *testing.T, mk pipeMaker) {
	t.Run("CloseWriteThenEOF", func(t *testing.T) {
		c1, c2 := mk(t)
		defer c1.Close()
		defer c2.Close()
		msg := bytes.Repeat([]byte("rnet"), 50000) // more than one ring's worth
		errc := make(chan error, 1)
		go func() {
			_, err := c1.Write(msg)
			if err == nil {
				err = c1.CloseWrite()
			}
			errc <- err
		}()
		got, err := io.ReadAll(c2)
		if err != nil {
			t.Fatalf("ReadAll after peer's CloseWrite: %v", err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("got %d bytes, want %d", len(got), len(msg))
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if s1, s2 := c1.Stats(), c2.Stats(); s1.BytesWritten != uint64(len(msg)) || s2.BytesRead != uint64(len(msg)) ||
			s1.MessagesSent == 0 || s2.MessagesReceived != s1.MessagesSent || s2.CreditUpdatesSent == 0 || s1.SendCompletions == 0 {
			t.Errorf("stats after %d bytes: writer %+v, reader %+v", len(msg), s1, s2)
		}
		// The half-closed side can still read.
		if _, err := c2.Write([]byte("reply")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 5)
		if _, err := io.ReadFull(c1, buf); err != nil || string(buf) != "reply" {
			t.Fatalf("read after CloseWrite: %q %v", buf, err)
		}
		if n, err := c2.Read(buf); n != 0 || err != io.EOF {
			t.Fatalf("second read after EOF = %d, %v; want 0, io.EOF", n, err)
		}
	})
	t.Run("ConcurrentWritesDoNotInterleave", func(t *testing.T) {
		// As with *net.TCPConn, each Write's bytes arrive together, whether
		// it fits the send ring at once (small records) or must wait for
		// room (records larger than the ring).
		c1, c2 := mk(t)
		defer c1.Close()
		defer c2.Close()
		// A lost byte or a stuck Write fails here, not at the test timeout.
		c1.SetDeadline(time.Now().Add(2 * time.Minute))
		c2.SetDeadline(time.Now().Add(2 * time.Minute))
		const writers, records = 4, 40
		sizes := []int{1, 100, 3000, 300 << 10}
		errc := make(chan error, writers)
		for w := range writers {
			go func() {
				for i := range records {
					rec := make([]byte, 5+sizes[(w+i)%len(sizes)])
					rec[0] = byte(w)
					binary.BigEndian.PutUint32(rec[1:], uint32(len(rec)-5))
					for j := 5; j < len(rec); j++ {
						rec[j] = byte(w)
					}
					if _, err := c1.Write(rec); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
		}
		var wg sync.WaitGroup
		var writeErr error
		wg.Go(func() {
			for range writers {
				if err := <-errc; err != nil && writeErr == nil {
					writeErr = err
				}
			}
			c1.CloseWrite()
		})
		defer func() { // on a failure below: unblock the writers first
			c1.Close()
			wg.Wait()
		}()
		r := bufio.NewReaderSize(c2, 64<<10)
		var head [5]byte
		n := 0
		for ; ; n++ {
			if _, err := io.ReadFull(r, head[:]); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("record %d: %v", n, err)
			}
			w, size := head[0], binary.BigEndian.Uint32(head[1:])
			if w >= writers || size > 300<<10 {
				t.Fatalf("record %d: header of writer %d, %d bytes: another Write's bytes in the header", n, w, size)
			}
			body := make([]byte, size)
			if _, err := io.ReadFull(r, body); err != nil {
				t.Fatalf("record %d of writer %d, %d bytes: %v", n, w, size, err)
			}
			for i, b := range body {
				if b != w {
					t.Fatalf("record %d of writer %d, %d bytes: another Write's bytes at %d", n, w, size, i)
				}
			}
		}
		wg.Wait()
		if writeErr != nil {
			t.Fatal(writeErr)
		}
		if n != writers*records {
			t.Fatalf("%d records arrived, want %d", n, writers*records)
		}
	})
	t.Run("WriteAfterCloseWrite", func(t *testing.T) {
		c1, c2 := mk(t)
		defer c1.Close()
		defer c2.Close()
		if err := c1.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		_, err := c1.Write([]byte("x"))
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "write" {
			t.Fatalf("Write after CloseWrite = %v, want a write *net.OpError", err)
		}
	})
	t.Run("ClosedConn", func(t *testing.T) {
		c1, c2 := mk(t)
		defer c2.Close()
		if err := c1.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if _, err := c1.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Read after Close = %v, want net.ErrClosed", err)
		}
		if _, err := c1.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Write after Close = %v, want net.ErrClosed", err)
		}
		if err := c1.Close(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("second Close = %v, want net.ErrClosed", err)
		}
		// The peer sees an orderly end of stream.
		if n, err := c2.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Errorf("peer Read after Close = %d, %v; want 0, io.EOF", n, err)
		}
	})
	t.Run("PastDeadlineWakesRead", func(t *testing.T) {
		c1, c2 := mk(t)
		defer c1.Close()
		defer c2.Close()
		errc := make(chan error, 1)
		go func() {
			_, err := c1.Read(make([]byte, 1))
			errc <- err
		}()
		// net/http's abortPendingRead does exactly this.
		c1.SetReadDeadline(time.Unix(1, 0))
		err := <-errc
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read woken by a past deadline = %v, want a timeout", err)
		}
		c1.SetReadDeadline(time.Time{})
		if _, err := c2.Write([]byte("y")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c1, make([]byte, 1)); err != nil {
			t.Fatalf("Read after clearing the deadline: %v", err)
		}
	})
	t.Run("Addrs", func(t *testing.T) {
		c1, c2 := mk(t)
		defer c1.Close()
		defer c2.Close()
		for _, a := range []net.Addr{c1.LocalAddr(), c1.RemoteAddr(), c2.LocalAddr(), c2.RemoteAddr()} {
			if a.Network() != "rdma" {
				t.Errorf("Network() = %q", a.Network())
			}
			if _, _, err := net.SplitHostPort(a.String()); err != nil {
				t.Errorf("address %q does not split: %v", a, err)
			}
		}
		if c1.LocalAddr().String() != c2.RemoteAddr().String() {
			t.Errorf("c1 local %v != c2 remote %v", c1.LocalAddr(), c2.RemoteAddr())
		}
	})
}
