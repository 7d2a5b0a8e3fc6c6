package main

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// callStats are the times of one workload's calls.
type callStats struct {
	calls    int64
	elapsed  time.Duration
	p50, p99 time.Duration
}

// runCalls makes total calls from conc goroutines, each taking the next
// call number until none is left, and times every call. The first error
// stops them all.
func runCalls(ctx context.Context, conc, total int, call func(ctx context.Context, n int) error) (callStats, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lats := make([]time.Duration, total)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range min(conc, total) {
		wg.Go(func() {
			for ctx.Err() == nil {
				n := int(next.Add(1) - 1)
				if n >= total {
					return
				}
				t0 := time.Now()
				if err := call(ctx, n); err != nil {
					cancel(err)
					return
				}
				lats[n] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	st := callStats{calls: int64(total), elapsed: time.Since(start)}
	if err := context.Cause(ctx); err != nil {
		return st, err
	}
	if total == 0 {
		return st, errors.New("no calls")
	}
	slices.Sort(lats)
	st.p50, st.p99 = percentile(lats, 0.50), percentile(lats, 0.99)
	return st, nil
}

// percentile is the value at fraction p of sorted (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
