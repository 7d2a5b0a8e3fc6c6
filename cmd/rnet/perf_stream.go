package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// perfStream is one connection of a test and what it has moved.
type perfStream struct {
	c     net.Conn
	moved atomic.Int64 // bytes written (reads, with -R)
	calls int64        // Write calls (Read calls, with -R)
	end   time.Time    // when the peer had counted every byte
}

// share is stream i's part of n bytes among streams: the first n%streams
// get one byte more, so that the parts add up to n.
func share(n int64, i, streams int) int64 {
	part := n / int64(streams)
	if int64(i) < n%int64(streams) {
		part++
	}
	return part
}

// send writes size-byte writes until it has sent bytes (if positive) or
// until the first write that ends once timeUp says -t has passed, then
// half-closes and waits for the server's count.
func (s *perfStream) send(size int, bytes int64, timeUp func() bool) error {
	buf := make([]byte, size)
	for {
		if bytes > 0 {
			left := bytes - s.moved.Load()
			if left <= 0 {
				break
			}
			if left < int64(len(buf)) {
				buf = buf[:left]
			}
		} else if s.calls > 0 && timeUp() {
			// At least one write, however late the stream started: a
			// clock read is cheap next to a Write.
			break
		}
		n, err := s.c.Write(buf)
		s.moved.Add(int64(n))
		s.calls++
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	if cw, ok := s.c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	got, err := readAck(s.c)
	s.end = time.Now()
	if err != nil {
		return fmt.Errorf("waiting for the server's count: %w", err)
	}
	if got != uint64(s.moved.Load()) {
		return fmt.Errorf("server received %d bytes, sent %d", got, s.moved.Load())
	}
	return nil
}

// receive reads what the server sends until it half-closes, then tells it
// how much came.
func (s *perfStream) receive(size int) error {
	buf := make([]byte, max(size, 256<<10))
	for {
		n, err := s.c.Read(buf)
		s.moved.Add(int64(n))
		s.calls++
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
	}
	s.end = time.Now()
	if s.moved.Load() == 0 {
		// A server that takes -R always sends something.
		return errors.New("the server sent nothing: it refused the test (see its output), or it predates -R")
	}
	if err := writeAck(s.c, s.moved.Load()); err != nil {
		return fmt.Errorf("sending the count: %w", err)
	}
	return nil
}
