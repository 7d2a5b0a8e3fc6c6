package rnettest_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/rnet"
	"github.com/rnet-dev/rnet/rnet/rnettest"
)

// TestDialerConfigPerDial: Dialers with different Configs dial one
// Listener; each dialling end runs with its Dialer's Config, each accepted
// end with the Fabric's, and bytes cross between the two; an invalid
// Config fails its dial alone.
func TestDialerConfigPerDial(t *testing.T) {
	f := rnettest.NewFabric(&rnet.Config{SendBufferSize: 64 << 10, RecvBufferSize: 64 << 10})
	ln, err := f.Listen("rdma", "10.0.0.2:7471")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, size := range []int{4 << 10, 256 << 10} {
		d := &rnettest.Dialer{Fabric: f, Config: &rnet.Config{SendBufferSize: size, RecvBufferSize: size, KeepAlive: -1}}
		nc, err := d.DialConn(context.Background(), "tcp", "10.0.0.2:7471")
		if err != nil {
			t.Fatalf("dial with %d-byte buffers: %v", size, err)
		}
		c := nc.(*rnet.Conn)
		defer c.Close()
		s, err := ln.AcceptRDMA()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got := c.Config(); got.SendBufferSize != size || got.RecvBufferSize != size || got.KeepAlive >= 0 {
			t.Errorf("the dialling end runs with %+v, want its Dialer's buffers of %d bytes and no keepalive", got, size)
		}
		if got := s.Config(); got.SendBufferSize != 64<<10 || got.RecvBufferSize != 64<<10 || got.KeepAlive < 0 {
			t.Errorf("the accepted end runs with %+v, want the Fabric's 64 KiB buffers and keepalive", got)
		}
		// More than either ring, both ways.
		msg := make([]byte, 1<<20)
		c.SetDeadline(time.Now().Add(time.Minute))
		s.SetDeadline(time.Now().Add(time.Minute))
		errs := make(chan error, 1)
		go func() { _, err := c.Write(msg); errs <- err }()
		if _, err := io.ReadFull(s, make([]byte, len(msg))); err != nil {
			t.Fatalf("reading what the %d-byte dialler wrote: %v", size, err)
		}
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		go func() { _, err := s.Write(msg); errs <- err }()
		if _, err := io.ReadFull(c, make([]byte, len(msg))); err != nil {
			t.Fatalf("reading at the %d-byte dialler: %v", size, err)
		}
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	bad := &rnettest.Dialer{Fabric: f, Config: &rnet.Config{SendBufferSize: 1}}
	if c, err := bad.Dial("rdma", "10.0.0.2:7471"); err == nil {
		c.Close()
		t.Error("a dial with a 1-byte send buffer succeeded")
	}
	if _, err := f.Dial("rdma", "10.0.0.2:7471"); err != nil {
		t.Errorf("the Fabric's own dial after a bad Config's: %v", err)
	}
}
