package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
)

// rstream runs C rstream's server and client with -S size -C count -I iters
// and the extra options, and returns the client's usec/xfer.
func rstream(ctx context.Context, c *config, port, size, count, iters int, extra ...string) (float64, error) {
	us, _, err := rstreamCounted(ctx, c, port, size, count, iters, extra...)
	return us, err
}

// rstreamCounted is rstream that also returns the client's system calls
// (see runClientCounted).
func rstreamCounted(ctx context.Context, c *config, port, size, count, iters int, extra ...string) (float64, float64, error) {
	args := append([]string{"-p", strconv.Itoa(port), "-S", strconv.Itoa(size), "-C", strconv.Itoa(count), "-I", strconv.Itoa(iters)}, extra...)
	var out string
	var syscalls float64
	err := serveWhile(ctx, c, "", nil, append([]string{"rstream", "-b", c.server}, args...), func(srv *proc) (err error) {
		out, syscalls, err = clientRetryingCounted(ctx, c, func(o string) bool { _, err := parseRstream(o); return err == nil },
			srv.running, append([]string{"rstream", "-s", c.server, "-b", c.client}, args...)...)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	us, err := parseRstream(out)
	return us, syscalls, err
}

// parseRstream reads usec/xfer from rstream's result line:
// "custom 64k 300 1 37m 2.32s 0.14 3873.00".
func parseRstream(out string) (float64, error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 8 && f[0] == "custom" && strings.HasSuffix(f[5], "s") {
			return strconv.ParseFloat(f[7], 64)
		}
	}
	return 0, errors.New("no rstream result line")
}

// rstreamBW measures rstream's throughput; extra is "-T b" for
// rstream-block.
func rstreamBW(extra ...string) measurer {
	return func(ctx context.Context, c *config, port, size int) (map[string]float64, error) {
		count := max(c.scaled(bwBytes(size), size)/size, 1)
		us, syscalls, err := rstreamCounted(ctx, c, port, size, count, 1, extra...)
		if err != nil {
			return nil, err
		}
		// The client sends count messages and receives them back.
		return map[string]float64{Throughput: float64(size) / us, SyscallsPerMsg: syscalls / float64(2*count)}, nil // bytes/µs = MB/s
	}
}

func rstreamLat(extra ...string) measurer {
	return func(ctx context.Context, c *config, port, size int) (map[string]float64, error) {
		us, err := rstream(ctx, c, port, size, 1, c.scaled(latIters(size), 20), extra...)
		if err != nil {
			return nil, err
		}
		return map[string]float64{Latency: 2 * us}, nil
	}
}
