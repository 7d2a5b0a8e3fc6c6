package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/rnet-dev/rnet/internal/bytesize"
	"github.com/rnet-dev/rnet/rnet"
)

// rdmaConfig is the connection Config of both ends, from the environment:
//
//	RNET_BUSY_POLL    how long a blocked Read or Write spins on the completion
//	                  queue before parking (a Go duration, e.g. 200us); on
//	                  machines where waking a parked goroutine is slow (an
//	                  emulated guest) spinning longer trades CPU for latency.
//	RNET_BUSY_POLL_LIMIT  how far the spin may grow on a connection whose
//	                  waits are short (Config.BusyPollLimit; -1 turns the
//	                  adaptive spin off).
//	RNET_ACK_TIMEOUT  how long the transport waits for an acknowledgement
//	                  before it resends (Config.AckTimeout, a Go duration).
//	RNET_BUFFER_SIZE  bytes in each of the send and receive rings (rstream
//	                  uses 1 MiB; rnet's default is rsocket's 128 KiB).
//
// The perf and ping flags of the same names (see rdmaFlags) override them.
func rdmaConfig() *rnet.Config {
	var c rnet.Config
	set := false
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{"RNET_BUSY_POLL", &c.BusyPoll}, {"RNET_BUSY_POLL_LIMIT", &c.BusyPollLimit}, {"RNET_ACK_TIMEOUT", &c.AckTimeout}} {
		v := os.Getenv(d.name)
		if v == "" {
			continue
		}
		if t, err := time.ParseDuration(v); err != nil {
			fmt.Fprintf(os.Stderr, "rnet: ignoring %s=%q: %v\n", d.name, v, err)
		} else {
			*d.dst, set = t, true
		}
	}
	if v := os.Getenv("RNET_BUFFER_SIZE"); v != "" {
		n, err := bytesize.Parse(v)
		if err != nil || n <= 0 || n > maxBuffer {
			fmt.Fprintf(os.Stderr, "rnet: ignoring RNET_BUFFER_SIZE=%q: want a number of bytes up to 1G\n", v)
		} else {
			c.SendBufferSize, c.RecvBufferSize, set = int(n), int(n), true
		}
	}
	if !set {
		return nil
	}
	return &c
}

// Config.SendBufferSize and RecvBufferSize's range.
const (
	minBuffer = 64
	maxBuffer = 1 << 30
)

// rdmaFlags are the Config settings perf and ping take as flags, each
// overriding its RNET_* variable; zero leaves the variable or the default.
type rdmaFlags struct {
	buffer        int64
	busyPoll      time.Duration
	busyPollLimit time.Duration
	ackTimeout    time.Duration
}

func (f *rdmaFlags) register(fs *flag.FlagSet) {
	fs.Var(byteSize[int64]{&f.buffer}, "buffer", "rdma: `bytes` in each of the send and receive rings, such as 1M (default 128K; RNET_BUFFER_SIZE)")
	fs.DurationVar(&f.busyPoll, "busy-poll", 0, "rdma: how long a blocked Read or Write spins before it parks; negative never spins, 1m polls until data comes (default 10µs; RNET_BUSY_POLL)")
	fs.DurationVar(&f.busyPollLimit, "busy-poll-limit", 0, "rdma: the most a Read awaiting its reply may spin; negative keeps every spin at -busy-poll (default adaptive; RNET_BUSY_POLL_LIMIT)")
	fs.DurationVar(&f.ackTimeout, "ack-timeout", 0, "rdma: how long the transport waits for an acknowledgement before it resends (RNET_ACK_TIMEOUT)")
}

// check returns what is wrong with the flags, for a usage error.
func (f rdmaFlags) check() error {
	if f.buffer != 0 && (f.buffer < minBuffer || f.buffer > maxBuffer) {
		return fmt.Errorf("-buffer must be in %d..%d (1G)", minBuffer, maxBuffer)
	}
	return nil
}

// config is the environment's Config with the flags that were given.
func (f rdmaFlags) config() *rnet.Config {
	c := rdmaConfig()
	if f == (rdmaFlags{}) {
		return c
	}
	if c == nil {
		c = &rnet.Config{}
	}
	if f.buffer != 0 {
		c.SendBufferSize, c.RecvBufferSize = int(f.buffer), int(f.buffer)
	}
	for _, d := range []struct{ flag, dst *time.Duration }{
		{&f.busyPoll, &c.BusyPoll}, {&f.busyPollLimit, &c.BusyPollLimit}, {&f.ackTimeout, &c.AckTimeout},
	} {
		if *d.flag != 0 {
			*d.dst = *d.flag
		}
	}
	return c
}
