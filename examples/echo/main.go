// Command echo is a net.Conn echo server and client over rnet, or over TCP
// with -tcp, printing latency and throughput.
//
//	echo -s -addr 10.77.0.2:7471                    # server
//	echo -c -addr 10.77.0.2:7471 -size 64 -n 10000  # client
//
// The client first makes -n round trips of -size bytes, one at a time, and
// reports their latency; then it streams -n messages of -size bytes while
// reading the echo concurrently, and reports the throughput. Its last line is
// machine-readable:
//
//	RESULT echo net=rdma size=64 count=10000 p50_us=... p99_us=... mean_us=... MBps=...
//
// The only difference between the RDMA and TCP runs is which Listen and Dial
// are called: everything after them uses the plain net.Conn interface.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/rnet-dev/rnet/examples/internal/exutil"
)

func main() {
	server := flag.Bool("s", false, "run the server")
	client := flag.Bool("c", false, "run the client")
	addr := flag.String("addr", "10.77.0.2:7471", "server address: listen on it (-s), or connect to it (-c)")
	from := flag.String("from", "", "client: local IP address to connect from (it picks the RDMA device)")
	size := flag.Int("size", 64, "client: message size in bytes")
	count := flag.Int("n", 10000, "client: number of messages, for each of the two phases")
	tcp := flag.Bool("tcp", false, "use TCP instead of RDMA")
	once := flag.Bool("once", false, "server: exit after serving one connection")
	flag.Parse()

	switch {
	case *server == *client:
		fmt.Fprintln(os.Stderr, "echo: pass exactly one of -s (server) or -c (client)")
		flag.Usage()
		os.Exit(2)
	case *server:
		if err := serve(*tcp, *addr, *once); err != nil {
			exutil.Fatal("echo", *tcp, err)
		}
	default:
		if *size <= 0 || *count <= 0 {
			fmt.Fprintln(os.Stderr, "echo: -size and -n must be positive")
			os.Exit(2)
		}
		if err := run(*tcp, *addr, *from, *size, *count); err != nil {
			exutil.Fatal("echo", *tcp, err)
		}
	}
}

func serve(tcp bool, addr string, once bool) error {
	ln, err := exutil.Listen(tcp, addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Printf("echo: listening on %s (%s)\n", ln.Addr(), exutil.Network(tcp))
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		if once {
			return echo(c)
		}
		go func() {
			if err := echo(c); err != nil {
				fmt.Fprintf(os.Stderr, "echo: %s: %v\n", c.RemoteAddr(), err)
			}
		}()
	}
}

// echo copies everything c sends back to it, until c closes its side.
func echo(c net.Conn) error {
	defer c.Close()
	n, err := io.CopyBuffer(c, c, make([]byte, 256<<10))
	if err != nil {
		return err
	}
	fmt.Printf("echo: %s: echoed %d bytes\n", c.RemoteAddr(), n)
	return nil
}

func run(tcp bool, addr, from string, size, count int) error {
	dial, err := exutil.Dialer(tcp, from)
	if err != nil {
		return err
	}
	start := time.Now()
	c, err := dial(context.Background(), addr)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Printf("echo: connected %s -> %s over %s in %v\n", c.LocalAddr(), c.RemoteAddr(), exutil.Network(tcp), time.Since(start).Round(time.Microsecond))

	msg := make([]byte, size)
	for i := range msg {
		msg[i] = byte(i*7 + 1)
	}
	got := make([]byte, size)

	// Latency: one message at a time.
	rtts := make([]time.Duration, count)
	var total time.Duration
	for i := range count {
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, got); err != nil {
			return err
		}
		rtts[i] = time.Since(t0)
		total += rtts[i]
		if !bytes.Equal(got, msg) {
			return fmt.Errorf("round trip %d: the echo differs from the message", i)
		}
	}
	p50, p99 := exutil.Percentiles(rtts)
	mean := total / time.Duration(count)
	fmt.Printf("latency:    %d round trips of %d B: p50 %s µs, p99 %s µs, mean %s µs\n", count, size, exutil.Micros(p50), exutil.Micros(p99), exutil.Micros(mean))

	// Throughput: write everything while a second goroutine reads the echo.
	volume := int64(size) * int64(count)
	readDone := make(chan error, 1)
	t0 := time.Now()
	go func() {
		buf := make([]byte, size)
		for i := range count {
			if _, err := io.ReadFull(c, buf); err != nil {
				readDone <- err
				return
			}
			if !bytes.Equal(buf, msg) {
				readDone <- fmt.Errorf("streamed message %d: the echo differs", i)
				return
			}
		}
		readDone <- nil
	}()
	for range count {
		if _, err := c.Write(msg); err != nil {
			return err
		}
	}
	if err := <-readDone; err != nil {
		return err
	}
	elapsed := time.Since(t0)
	mbps := exutil.MBps(volume, elapsed)
	fmt.Printf("throughput: %d messages of %d B (%d bytes) echoed in %v: %s MB/s each way\n", count, size, volume, elapsed.Round(time.Microsecond), mbps)
	fmt.Printf("RESULT echo net=%s size=%d count=%d p50_us=%s p99_us=%s mean_us=%s MBps=%s\n",
		exutil.Network(tcp), size, count, exutil.Micros(p50), exutil.Micros(p99), exutil.Micros(mean), mbps)
	return c.Close()
}
