package main

import "context"

// bwBytes is how much one throughput test moves at a size (before -scale):
// enough for a second or more at Soft-RoCE-under-TCG speeds.
func bwBytes(size int) int {
	switch {
	case size <= 64:
		return 1 << 20
	case size <= 1<<10:
		return 4 << 20
	case size <= 4<<10:
		return 8 << 20
	}
	return 16 << 20
}

func latIters(size int) int {
	if size >= 64<<10 {
		return 200
	}
	return 1000
}

// measurer runs one transport's test at one size: the figures it returns are
// keyed by kind (Throughput, Latency, LatencyP50).
type measurer func(ctx context.Context, c *config, port, size int) (map[string]float64, error)
