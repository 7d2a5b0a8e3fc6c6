package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// floorWork is the µs each side of the floor works per message, so that its
// round trip is about rstream's 64 B round trip in the lab.
const floorWork = 20

// runFloor runs gofloor once (its C twin and its rnet-like Go variant) and
// returns each variant's mean and median round trip.
func runFloor(ctx context.Context, c *config) (map[string]map[string]float64, error) {
	out, err := runClient(ctx, c, nil, c.gofloor, "-c", c.gofloorC, "-runs", "1", "-json",
		"-n", strconv.Itoa(c.scaled(5000, 200)), "-work", strconv.Itoa(floorWork))
	if err != nil {
		return nil, err
	}
	return parseFloor(out)
}

// parseFloor reads gofloor -json's lines: one JSON object per variant.
func parseFloor(out string) (map[string]map[string]float64, error) {
	names := map[string]string{"c": FloorC, "go-cgo": FloorGo}
	got := map[string]map[string]float64{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var res struct {
			Variant string  `json:"variant"`
			P50Us   float64 `json:"p50_us"`
			MeanUs  float64 `json:"mean_us"`
		}
		if !strings.HasPrefix(line, "{") {
			continue
		}
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			return nil, fmt.Errorf("gofloor output %q: %w", line, err)
		}
		if name, ok := names[res.Variant]; ok && res.MeanUs > 0 && res.P50Us > 0 {
			got[name] = map[string]float64{Latency: res.MeanUs, LatencyP50: res.P50Us}
		}
	}
	if len(got) != len(names) {
		return nil, fmt.Errorf("gofloor output lacks a variant: %q", out)
	}
	return got, nil
}
