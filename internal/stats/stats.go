// Package stats computes the summaries that rnet's tools and benchmarks
// report, so that every figure uses one definition: nearest-rank
// percentiles of samples and medians over repeated runs.
package stats

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by
// nearest rank: the sample whose rank is p% of the count, rounded to the
// nearest whole rank, so that every percentile is a measured value (the
// C twin of benchmarks/gofloor uses the same rule). It returns 0 for no
// samples.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Median returns the median of v (the mean of the middle two for an even
// count), or NaN for no values. v is not modified.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
