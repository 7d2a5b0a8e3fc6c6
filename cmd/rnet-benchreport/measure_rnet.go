package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/rnet-dev/rnet/internal/perfjson"
)

// rnetPerf measures rnet perf; env is added to both processes' environment
// (RNET_BUSY_POLL for rnet-poll).
func rnetPerf(tcp bool, env ...string) measurer {
	return func(ctx context.Context, c *config, port, size int) (map[string]float64, error) {
		addr := c.server + ":" + strconv.Itoa(port)
		sargs, cargs := []string{c.rnet, "perf", "-s", addr, "-once"}, []string{c.rnet, "perf", "-c", addr, "-from", c.client,
			"-size", strconv.Itoa(size), "-n", strconv.Itoa(c.scaled(bwBytes(size), size)), "-q", "--json"}
		if tcp {
			sargs, cargs = append(sargs, "-tcp"), append(cargs, "-tcp")
		}
		srv, err := startServer(ctx, c, "listening on", env, sargs...)
		if err != nil {
			return nil, err
		}
		out, syscalls, err := runClientCounted(ctx, c, env, cargs...)
		if err != nil {
			srv.kill()
			srv.wait()
			return nil, err
		}
		if err := srv.wait(); err != nil {
			return nil, err
		}
		var res perfjson.PerfResult
		if err := json.Unmarshal([]byte(lastLine(out)), &res); err != nil {
			return nil, fmt.Errorf("rnet perf output %q: %w", out, err)
		}
		vals := map[string]float64{Throughput: res.MBps}
		if writes := float64(res.Writes); writes > 0 && !tcp {
			// The client's work per Write: a message of the stream.
			vals[SyscallsPerMsg] = syscalls / writes
			vals[CgoPerMsg] = res.CgoPerWrite
			if res.Stats != nil {
				vals[CompletionsPerMsg] = float64(res.Stats.SendCompletions+res.Stats.RecvCompletions) / writes
			}
		}
		return vals, nil
	}
}

func rnetPing(tcp bool, env ...string) measurer {
	return func(ctx context.Context, c *config, port, size int) (map[string]float64, error) {
		addr := c.server + ":" + strconv.Itoa(port)
		sargs, cargs := []string{c.rnet, "perf", "-s", addr, "-once"}, []string{c.rnet, "ping", addr, "-from", c.client,
			"-size", strconv.Itoa(size), "-n", strconv.Itoa(c.scaled(latIters(size), 20)), "-warmup", "50", "--json"}
		if tcp {
			sargs, cargs = append(sargs, "-tcp"), append(cargs, "-tcp")
		}
		srv, err := startServer(ctx, c, "listening on", env, sargs...)
		if err != nil {
			return nil, err
		}
		out, err := runClient(ctx, c, env, cargs...)
		if err != nil {
			srv.kill()
			srv.wait()
			return nil, err
		}
		if err := srv.wait(); err != nil {
			return nil, err
		}
		var res perfjson.PingResult
		if err := json.Unmarshal([]byte(lastLine(out)), &res); err != nil {
			return nil, fmt.Errorf("rnet ping output %q: %w", out, err)
		}
		return map[string]float64{Latency: res.MeanUs, LatencyP50: res.P50Us}, nil
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
