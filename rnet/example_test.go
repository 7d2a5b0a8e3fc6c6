package rnet_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"time"

	"github.com/rnet-dev/rnet/rnet"
)

// An echo server: the code after Listen is what it would be over TCP. The
// address is that of an RDMA-capable interface (RoCE, iWARP or IPoIB).
func ExampleListen() {
	ln, err := rnet.Listen("rdma", "10.77.0.2:7471")
	if err != nil {
		log.Fatal(err) // on Linux without an RDMA device, errors.Is(err, rnet.ErrNoDevice)
	}
	defer ln.Close()
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func(c net.Conn) {
			defer c.Close()
			io.Copy(c, c)
		}(c)
	}
}

// A client: Dial returns a *rnet.Conn, which is a net.Conn.
func ExampleDial() {
	c, err := rnet.Dial("rdma", "10.77.0.2:7471")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintln(c, "hello over RDMA"); err != nil {
		log.Fatal(err)
	}
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(reply)
}

// A Dialer chooses the local device (by its address), bounds the connect and
// sizes the connection's rings.
func ExampleDialer() {
	d := rnet.Dialer{
		LocalAddr: &rnet.Addr{AddrPort: netip.MustParseAddrPort("10.77.0.1:0")},
		Timeout:   10 * time.Second,
		Config:    &rnet.Config{SendBufferSize: 1 << 20, RecvBufferSize: 1 << 20},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "rdma", "10.77.0.2:7471")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println(c.LocalAddr(), "->", c.RemoteAddr())
}
