package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
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
