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
		var out string
		var syscalls float64
		err := serveWhile(ctx, c, "listening on", env, sargs, func(*proc) (err error) {
			out, syscalls, err = runClientCounted(ctx, c, env, cargs...)
			return err
		})
		if err != nil {
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

// rnetPing measures rnet ping: its round trips and, over rdma, the client's
// crossings into C per round trip.
func rnetPing(tcp bool, env ...string) measurer {
	return func(ctx context.Context, c *config, port, size int) (map[string]float64, error) {
		res, err := runPing(ctx, c, c.rnet, tcp, env, port, size)
		if err != nil {
			return nil, err
		}
		vals := map[string]float64{Latency: res.MeanUs, LatencyP50: res.P50Us}
		if res.CgoPerTrip != nil {
			vals[CgoPerTrip] = *res.CgoPerTrip
		}
		return vals, nil
	}
}

// rnetPingCounting measures rnet ping over rdma with c.rnetCounting, the rnet
// command built with the rnet_lockcount tag, as the client: its crossings
// and locks per round trip, and not its times, which the counting slows.
// The server is c.rnet, as in the timed tests, so that only the counting
// client differs from them.
func rnetPingCounting(env ...string) measurer {
	return func(ctx context.Context, c *config, port, size int) (map[string]float64, error) {
		res, err := runPing(ctx, c, c.rnetCounting, false, env, port, size)
		if err != nil {
			return nil, err
		}
		if res.LocksPerTrip == nil || res.CgoPerTrip == nil {
			return nil, fmt.Errorf("%s reports no locks_per_round_trip or cgo_per_round_trip: build it with go build -tags rnet_lockcount ./cmd/rnet (-rnet-counting)", c.rnetCounting)
		}
		return map[string]float64{CgoPerTrip: *res.CgoPerTrip, LocksPerTrip: *res.LocksPerTrip}, nil
	}
}

// runPing runs an rnet perf -s server (c.rnet) and, against it, rnet ping
// of the command clientCmd; it returns ping's result.
func runPing(ctx context.Context, c *config, clientCmd string, tcp bool, env []string, port, size int) (perfjson.PingResult, error) {
	var res perfjson.PingResult
	addr := c.server + ":" + strconv.Itoa(port)
	sargs, cargs := []string{c.rnet, "perf", "-s", addr, "-once"}, []string{clientCmd, "ping", addr, "-from", c.client,
		"-size", strconv.Itoa(size), "-c", strconv.Itoa(c.scaled(latIters(size), 20)), "-warmup", "50", "--json"}
	if tcp {
		sargs, cargs = append(sargs, "-tcp"), append(cargs, "-tcp")
	}
	var out string
	err := serveWhile(ctx, c, "listening on", env, sargs, func(*proc) (err error) {
		out, err = runClient(ctx, c, env, cargs...)
		return err
	})
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal([]byte(lastLine(out)), &res); err != nil {
		return res, fmt.Errorf("rnet ping output %q: %w", out, err)
	}
	return res, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
