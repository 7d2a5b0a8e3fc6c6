package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The control connection's bounds: a message is one line of JSON of at
// most maxControlMessage bytes (each end's are far smaller), and the
// server waits at most controlTimeout for the client's first request once
// it has connected, and for the rest of any request once its first byte
// has come. Between requests the client opens its connections and streams
// on them, which takes as long as it takes.
const (
	maxControlMessage = 64 << 10
	controlTimeout    = 30 * time.Second
)

// controlReader reads the control connection's messages.
type controlReader struct {
	c net.Conn
	r *bufio.Reader
	// firstWait bounds the wait for the first message, and rest a message's
	// bytes after its first; 0 is no bound.
	firstWait, rest time.Duration
}

func newControlReader(c net.Conn, firstWait, rest time.Duration) *controlReader {
	return &controlReader{c: c, r: bufio.NewReaderSize(c, maxControlMessage), firstWait: firstWait, rest: rest}
}

// read reads the next message into v; first says it is the first. It
// returns io.EOF when the peer closed between messages.
func (cr *controlReader) read(v any, first bool) error {
	var wait time.Time
	if first && cr.firstWait > 0 {
		wait = time.Now().Add(cr.firstWait)
	}
	cr.c.SetReadDeadline(wait)
	if _, err := cr.r.Peek(1); err != nil {
		if isTimeout(err) {
			return fmt.Errorf("no request within %v of connecting: %w", cr.firstWait, err)
		}
		return err
	}
	if cr.rest > 0 {
		cr.c.SetReadDeadline(time.Now().Add(cr.rest))
	}
	line, err := cr.r.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return fmt.Errorf("a control message longer than %d bytes, the most either end takes", maxControlMessage)
	case isTimeout(err):
		return fmt.Errorf("a control message not whole within %v of its first byte: %w", cr.rest, err)
	case err == io.EOF && len(line) > 0:
		return fmt.Errorf("a control message cut short: %w", io.ErrUnexpectedEOF)
	case err != nil:
		return err
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("a bad control message %.64q: %v", line, err)
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
