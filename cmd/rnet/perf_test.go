package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/perfjson"
)

// TestPerfDurationEndsAfterTheWriteThatCrossesIt: perf -c -t stops at the
// first Write that ends past the duration, whatever the write size, since a
// look at the clock only every few writes lets large writes run far past
// it. The server says -t has passed (the client's clock, injected) before
// it reads a byte, so the first 16 MiB write, which the sockets' buffers
// cannot hold, ends after it.
func TestPerfDurationEndsAfterTheWriteThatCrossesIt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var timeUp atomic.Bool
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.(*net.TCPConn).SetReadBuffer(64 << 10)
		if _, err := io.ReadFull(c, make([]byte, helloLen)); err != nil {
			return
		}
		timeUp.Store(true)
		n, _ := io.Copy(io.Discard, c)
		var ack [8]byte
		binary.BigEndian.PutUint64(ack[:], uint64(n))
		c.Write(ack[:])
	}()
	var out bytes.Buffer
	o := perfOpts{addr: ln.Addr().String(), size: 16 << 20, duration: time.Hour, interval: time.Second, tcp: true, quiet: true, json: true, timeUp: &timeUp}
	if err := runPerf(o, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var r perfjson.PerfResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if r.Writes != 1 {
		t.Errorf("perf -t wrote %d times; the first write already ended past it", r.Writes)
	}
}

// TestPingMessagesComeFromABudget: the messages a server echoes are held
// whole, so together they take from one budget; a ping whose message would
// pass what is left is refused, the others are served, and what a finished
// ping took is given back.
func TestPingMessagesComeFromABudget(t *testing.T) {
	pings := newByteBudget(1000)
	limits := serverLimits{helloTimeout: time.Hour, idleTimeout: time.Hour}
	type served struct {
		res ServerResult
		err error
	}
	start := func(size int) (client net.Conn, done <-chan served) {
		client, server := net.Pipe()
		t.Cleanup(func() { client.Close() }) // ends a server still reading if a check failed
		ch := make(chan served, 1)
		go func() {
			guard := newConnGuard(server, limits)
			defer guard.stop()
			res, err := serveConn(server, guard, perfOpts{}, pings, func(hello) error { return nil })
			server.Close()
			ch <- served{res, err}
		}()
		if _, err := client.Write(hello{mode: modePing, size: uint32(size)}.encode()); err != nil {
			t.Fatal(err)
		}
		return client, ch
	}
	echoOnce := func(c net.Conn, size int) {
		t.Helper()
		msg := bytes.Repeat([]byte{7}, size)
		go c.Write(msg) // net.Pipe: the write ends as the server reads
		back := make([]byte, size)
		if _, err := io.ReadFull(c, back); err != nil {
			t.Fatalf("echo of %d bytes: %v", size, err)
		}
		if !bytes.Equal(back, msg) {
			t.Fatalf("echo of %d bytes came back changed", size)
		}
	}

	first, firstDone := start(600)
	echoOnce(first, 600) // the server holds its 600 bytes now
	second, secondDone := start(600)
	go second.Write(make([]byte, 600)) // the server takes the memory once the message comes
	if r := <-secondDone; r.err == nil || !strings.Contains(r.err.Error(), "refused: ping messages of 600 B would pass the 1000 B this server buffers for the clients it serves at once (-max-buffered; 600 B held now)") {
		t.Errorf("a ping past the budget: %v", r.err)
	}
	second.Close()
	third, thirdDone := start(400)
	echoOnce(third, 400)
	third.Close()
	if r := <-thirdDone; r.err != nil || r.res.Messages != 1 {
		t.Errorf("a ping within the budget: %+v, %v", r.res, r.err)
	}
	first.Close()
	if r := <-firstDone; r.err != nil || r.res.Messages != 1 {
		t.Errorf("the first ping: %+v, %v", r.res, r.err)
	}
	pings.mu.Lock()
	left := pings.left
	pings.mu.Unlock()
	if left != 1000 {
		t.Errorf("%d of 1000 bytes left after every ping ended", left)
	}
}

// TestPingAgainstAServerThatRefuses: a first round trip that fails says the
// server may have refused the test, and where to look.
func TestPingAgainstAServerThatRefuses(t *testing.T) {
	addr := refusingServer(t, helloLen)
	err := runPing(pingOpts{addr: addr, tcp: true, size: 64, count: 1, quiet: true}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "the server may have refused the test; its output says why") {
		t.Errorf("ping: %v", err)
	}
}
