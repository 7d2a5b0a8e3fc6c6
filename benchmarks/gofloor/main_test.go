//go:build linux && cgo

package main

import (
	"os"
	"path/filepath"
	"testing"
)

// Both sides in one process: the ping-pong completes and the pinger's
// summary is ordered and no shorter than the work it timed.
func TestSidesPingPong(t *testing.T) {
	for _, v := range []string{"go", "go-cgo", "go-cspin", "go-cspin-noyield"} {
		t.Run(v, func(t *testing.T) { testSidesPingPong(t, v) })
	}
}

func testSidesPingPong(t *testing.T, variant string) {
	shm := filepath.Join(t.TempDir(), "page")
	if err := os.WriteFile(shm, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	const n, work = 300, 5
	pongErr := make(chan error, 1)
	go func() {
		_, err := side("pong", shm, variant, n, work)
		pongErr <- err
	}()
	res, err := side("ping", shm, variant, n, work)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-pongErr; err != nil {
		t.Fatal(err)
	}
	// Each round trip includes both sides' work.
	if res.P50us < 2*work {
		t.Errorf("p50 %.1f µs is shorter than the %d µs of work in a round trip", res.P50us, 2*work)
	}
	if !(res.P50us <= res.P99us && res.P99us <= res.MaxUs && res.MeanUs <= res.MaxUs) {
		t.Errorf("summary out of order: %+v", res)
	}
}

func TestSideRejectsUnknownRoleAndVariant(t *testing.T) {
	if _, err := side("both", "x", "go", 1, 0); err == nil {
		t.Error("role both accepted")
	}
	if _, err := side("ping", "x", "rust", 1, 0); err == nil {
		t.Error("variant rust accepted")
	}
}

func TestMedian(t *testing.T) {
	rs := []result{{MeanUs: 3}, {MeanUs: 1}, {MeanUs: 2}, {MeanUs: 10}}
	if got := median(rs, meanOf); got != 2.5 {
		t.Errorf("median of 1,2,3,10 = %v, want 2.5", got)
	}
	if got := median(rs[:3], meanOf); got != 2 {
		t.Errorf("median of 3,1,2 = %v, want 2", got)
	}
}
