package rnettest_test

import (
	"fmt"
	"io"
	"log"

	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnettest"
)

// A test of code that serves over rnet: it gets a real *rnet.Listener and
// dials it, with no RDMA device.
func Example() {
	f := rnettest.NewFabric(nil)
	ln, err := f.Listen("rdma", "127.0.0.1:7471")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()

	go func() { // the code under test: an upper-casing echo server
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		msg, _ := io.ReadAll(c)
		for i, b := range msg {
			if 'a' <= b && b <= 'z' {
				msg[i] = b - 'a' + 'A'
			}
		}
		c.Write(msg)
	}()

	c, err := f.Dial("rdma", "127.0.0.1:7471")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("hello over rdma"))
	c.CloseWrite()
	reply, err := io.ReadAll(c)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s from %v\n", reply, c.RemoteAddr())
	// Output: HELLO OVER RDMA from 127.0.0.1:7471
}

// Dials of one Listener with a Config of their own, as per-dial options:
// here send rings of two sizes.
func ExampleDialer() {
	f := rnettest.NewFabric(nil)
	ln, err := f.Listen("rdma", "127.0.0.1:7471")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	for _, size := range []int{4096, 1 << 20} {
		d := &rnettest.Dialer{Fabric: f, Config: &rnet.Config{SendBufferSize: size}}
		c, err := d.Dial("rdma", "127.0.0.1:7471")
		if err != nil {
			log.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(c.Config().SendBufferSize)
		s.Close()
		c.Close()
	}
	// Output:
	// 4096
	// 1048576
}
