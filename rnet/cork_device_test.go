//go:build linux && cgo

package rnet

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
)

// corkStream is the bytes of n small messages, 1 to 64 bytes each.
func corkStream(n int) []byte {
	var all []byte
	for i := range n {
		all = append(all, bytes.Repeat([]byte{byte(i)}, 1+i%64)...)
	}
	return all
}

// corkWrites writes corkStream(n) as n Writes back to back, so that many
// find a transfer in flight and are corked. The peer must already be
// reading: the stream is larger than the idle rings.
func corkWrites(t *testing.T, c *Conn, n int) {
	t.Helper()
	all := corkStream(n)
	for i := range n {
		m := all[:1+i%64]
		all = all[len(m):]
		if _, err := c.Write(m); err != nil {
			t.Fatal(err)
		}
	}
}

// readAllOf reads len(want) bytes from s in a goroutine and reports
// whether they were want.
func readAllOf(s *Conn, want []byte) <-chan error {
	errc := make(chan error, 1)
	go func() {
		got := make([]byte, len(want))
		if _, err := io.ReadFull(s, got); err != nil {
			errc <- err
			return
		}
		if !bytes.Equal(got, want) {
			errc <- errors.New("the peer read other bytes than were written")
			return
		}
		errc <- nil
	}()
	return errc
}

// TestRXEAutocork: with autocorking on (the default), small writes made
// back to back reach the peer intact when the writer then only reads, when
// it calls CloseWrite, and when its Read gives up at a deadline; nothing is
// left behind. On a device the pusher would release corked bytes in each
// case anyway, so this checks integrity and release; the TestSimCork tests,
// which hold completions back, tell the paths apart.
func TestRXEAutocork(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	const writes = 2000
	var coalesced uint64

	t.Run("WriteThenRead", func(t *testing.T) {
		c, s := rxeMaker(pair, nil)(t)
		defer s.Close()
		defer c.Close()
		errc := readAllOf(s, corkStream(writes))
		corkWrites(t, c, writes)
		go func() {
			if <-errc == nil {
				s.Write([]byte("ok"))
			}
			s.CloseWrite()
		}()
		reply, err := io.ReadAll(c)
		if err != nil || string(reply) != "ok" {
			t.Fatalf("reply %q, %v", reply, err)
		}
		coalesced += c.Stats().CoalescedWrites
	})
	t.Run("CloseWrite", func(t *testing.T) {
		c, s := rxeMaker(pair, nil)(t)
		defer s.Close()
		defer c.Close()
		want := corkStream(writes)
		type result struct {
			got []byte
			err error
		}
		done := make(chan result, 1)
		go func() {
			got, err := io.ReadAll(s)
			done <- result{got, err}
		}()
		corkWrites(t, c, writes)
		if err := c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || !bytes.Equal(r.got, want) {
			t.Fatalf("read %d of %d bytes, %v", len(r.got), len(want), r.err)
		}
		coalesced += c.Stats().CoalescedWrites
	})
	t.Run("Deadline", func(t *testing.T) {
		c, s := rxeMaker(pair, nil)(t)
		defer s.Close()
		defer c.Close()
		errc := readAllOf(s, corkStream(writes))
		corkWrites(t, c, writes)
		if err := c.SetReadDeadline(time.Now().Add(time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read with nothing to read: %v, want a deadline error", err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		coalesced += c.Stats().CoalescedWrites
	})
	t.Logf("%d of %d writes coalesced", coalesced, 3*writes)
	checkReleased(t, gor0, fds0, res0)
}
