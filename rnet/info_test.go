package rnet

import (
	"errors"
	"net"
	"testing"
)

// TestSimInfo: over the test fabric, Info reports the settings and ring
// sizes in effect and no device, and fails with net.ErrClosed after Close.
func TestSimInfo(t *testing.T) {
	c, s := simPipe(t, &Config{SendBufferSize: 256 << 10, RecvBufferSize: 64 << 10, IdleBufferSize: 4096, SendQueueSize: 64, RecvQueueSize: 32})
	defer s.Close()
	info, err := c.Info()
	if err != nil {
		t.Fatal(err)
	}
	want := ConnInfo{
		Transport:       "simulated",
		InlineThreshold: 64,
		SendRingSize:    4096, SendBufferSize: 256 << 10,
		RecvRingSize: 4096, RecvBufferSize: 64 << 10,
		SendQueueSize: 64, CreditWindow: 32, RecvQueueSize: 32,
	}
	if info != want {
		t.Errorf("Info = %+v, want %+v", info, want)
	}
	nd, ns := simPipe(t, &Config{NoDelay: true})
	defer ns.Close()
	defer nd.Close()
	if info, err := nd.Info(); err != nil || !info.NoDelay {
		t.Errorf("Info with Config.NoDelay: NoDelay %v, error %v; want true", info.NoDelay, err)
	}
	c.Close()
	if _, err := c.Info(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Info after Close: %v, want net.ErrClosed", err)
	}
}
