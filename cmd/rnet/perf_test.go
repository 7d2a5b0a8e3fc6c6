package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestPerfDurationEndsAfterTheWriteThatCrossesIt: perf -c -t stops at the
// first Write that ends past the duration, whatever the write size (it used
// to look at the clock every 16 writes: 16 x 64 MiB before a first look).
// The server reads nothing until the duration has surely passed, so the
// first 16 MiB write is still blocked when it does.
func TestPerfDurationEndsAfterTheWriteThatCrossesIt(t *testing.T) {
	const d = 20 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
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
		time.Sleep(25 * d) // not synchronisation: the client's -t must pass
		n, _ := io.Copy(io.Discard, c)
		var ack [8]byte
		binary.BigEndian.PutUint64(ack[:], uint64(n))
		c.Write(ack[:])
	}()
	var out bytes.Buffer
	o := perfOpts{addr: ln.Addr().String(), size: 16 << 20, duration: d, interval: time.Second, tcp: true, quiet: true, json: true}
	if err := runPerf(o, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var r PerfResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if r.Writes != 1 {
		t.Errorf("perf -t %v wrote %d times; the first write already ended past it", d, r.Writes)
	}
}

// TestPingMessagesComeFromABudget: the messages a server echoes are held
// whole, so together they take from one budget; a ping whose message would
// pass what is left is refused, the others are served, and what a finished
// ping took is given back.
func TestPingMessagesComeFromABudget(t *testing.T) {
	pings := newByteBudget(1000)
	type served struct {
		res ServerResult
		err error
	}
	start := func(size int) (client net.Conn, done <-chan served) {
		client, server := net.Pipe()
		t.Cleanup(func() { client.Close() }) // ends a server still reading if a check failed
		ch := make(chan served, 1)
		go func() {
			res, err := serveConn(server, perfOpts{}, pings, func(hello) error { return nil })
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
	if r := <-secondDone; r.err == nil || !strings.Contains(r.err.Error(), "refused: ping messages of 600 B would pass the 1000 B this server holds") {
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
