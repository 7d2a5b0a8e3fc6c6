package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// perftest runs ib_write_bw or ib_write_lat between the two devices and
// returns the fields of the result line (the one after the "#bytes" header).
func perftest(ctx context.Context, c *config, tool string, port int, extra ...string) ([]string, error) {
	common := append([]string{"-x", strconv.Itoa(c.gid), "-F", "-p", strconv.Itoa(port)}, extra...)
	var out string
	err := serveWhile(ctx, c, "", nil, append([]string{tool, "-d", c.sdev}, common...), func(*proc) (err error) {
		out, err = clientRetrying(ctx, c, func(o string) bool { _, err := parsePerftest(o); return err == nil },
			nil, append(append([]string{tool, "-d", c.cdev}, common...), c.server)...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return parsePerftest(out)
}

func parsePerftest(out string) ([]string, error) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, "#bytes") && i+1 < len(lines) {
			f := strings.Fields(lines[i+1])
			if len(f) >= 5 {
				if _, err := strconv.Atoi(f[0]); err == nil {
					return f, nil
				}
			}
		}
	}
	return nil, errors.New("no perftest result line")
}

func ibWriteBW(ctx context.Context, c *config, port, size int) (map[string]float64, error) {
	iters := max(c.scaled(bwBytes(size), size)/size, 20)
	f, err := perftest(ctx, c, "ib_write_bw", port, "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters))
	if err != nil {
		return nil, err
	}
	// #bytes #iterations BW-peak BW-average MsgRate; perftest's MB is 2^20 bytes.
	avg, err := strconv.ParseFloat(f[3], 64)
	if err != nil {
		return nil, fmt.Errorf("ib_write_bw BW average %q: %w", f[3], err)
	}
	return map[string]float64{Throughput: avg * (1 << 20) / 1e6}, nil
}

func ibWriteLat(ctx context.Context, c *config, port, size int) (map[string]float64, error) {
	f, err := perftest(ctx, c, "ib_write_lat", port, "-s", strconv.Itoa(size), "-n", strconv.Itoa(c.scaled(latIters(size), 20)))
	if err != nil {
		return nil, err
	}
	// #bytes #iterations t_min t_max t_typical t_avg ...: half round trips.
	if len(f) < 6 {
		return nil, fmt.Errorf("ib_write_lat result %q", f)
	}
	typ, err1 := strconv.ParseFloat(f[4], 64)
	avg, err2 := strconv.ParseFloat(f[5], 64)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("ib_write_lat result %q: %w", f, err)
	}
	return map[string]float64{Latency: 2 * avg, LatencyP50: 2 * typ}, nil
}
