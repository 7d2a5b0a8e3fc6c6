package stats

import (
	"math"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	d := make([]time.Duration, 100)
	for i := range d {
		d[i] = time.Duration(i + 1)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50}, {90, 90}, {99, 99}, {100, 100}, {0.1, 1}} {
		if got := Percentile(d, c.p); got != c.want {
			t.Errorf("p%v of 1..100 = %v, want %v", c.p, got, c.want)
		}
	}
	// Ranks are p% of the count rounded to the nearest: here 1, 1.6, 2,
	// 2.52 and 3.96 of four samples.
	four := []time.Duration{10, 20, 30, 40}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{25, 10}, {40, 20}, {50, 20}, {63, 30}, {99, 40}} {
		if got := Percentile(four, c.p); got != c.want {
			t.Errorf("p%v of %v = %v, want %v", c.p, four, got, c.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %v, want 0", got)
	}
}

func TestMedian(t *testing.T) {
	v := []float64{3, 1, 2, 10}
	if got := Median(v); got != 2.5 {
		t.Errorf("median of 1,2,3,10 = %v, want 2.5", got)
	}
	if v[0] != 3 {
		t.Error("Median sorted its argument")
	}
	if got := Median(v[:3]); got != 2 {
		t.Errorf("median of 3,1,2 = %v, want 2", got)
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("median of nothing is not NaN")
	}
}
