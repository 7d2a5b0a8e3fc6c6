package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeRnet writes a shell script that stands in for the rnet command: as
// `perf -s ADDR` it says it listens and exits, as `ping` it prints pingJSON
// if the environment polls (RNET_BUSY_POLL), as anything else it fails. If
// not serves, its perf -s fails: the server must be another command.
func fakeRnet(t *testing.T, name, pingJSON string, serves bool) string {
	t.Helper()
	perf := `perf) echo "not this command's server"; exit 1 ;;`
	if serves {
		perf = `perf) echo "listening on $3" ;;`
	}
	script := "#!/bin/sh\ncase \"$1\" in\n" + perf + "\n" +
		`ping) [ -n "$RNET_BUSY_POLL" ] || { echo "not polling"; exit 1; }; echo '` + pingJSON + `' ;;` + "\n" +
		"*) exit 2 ;;\nesac\n"
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPingWorkPerRoundTrip: the timed rnet-poll test keeps ping's crossings
// per round trip beside its times; the counting one keeps the counting
// client's crossings and locks and no time, against the timed build's
// server; a counting binary that reports no locks is an error that says how
// to build one.
func TestPingWorkPerRoundTrip(t *testing.T) {
	const timedJSON = `{"test":"ping","transport":"rdma","count":20,"p50_us":40,"mean_us":45,"cgo_per_round_trip":3}`
	c := &config{
		rnet:         fakeRnet(t, "rnet", timedJSON, true),
		rnetCounting: fakeRnet(t, "rnet-lockcount", `{"test":"ping","transport":"rdma","count":20,"p50_us":90,"mean_us":95,"cgo_per_round_trip":3.5,"locks_per_round_trip":14}`, false),
		server:       "10.77.0.2", client: "10.77.0.1", scale: 1,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	poll := "RNET_BUSY_POLL=" + pollForever

	got, err := rnetPing(false, poll)(ctx, c, 1, 64)
	if want := map[string]float64{Latency: 45, LatencyP50: 40, CgoPerTrip: 3}; err != nil || !maps.Equal(got, want) {
		t.Errorf("timed ping: %v, %v; want %v", got, err, want)
	}
	got, err = rnetPingCounting(poll)(ctx, c, 2, 64)
	if want := map[string]float64{CgoPerTrip: 3.5, LocksPerTrip: 14}; err != nil || !maps.Equal(got, want) {
		t.Errorf("counting ping: %v, %v; want %v", got, err, want)
	}

	c.rnetCounting = c.rnet // a build without the tag
	if got, err := rnetPingCounting(poll)(ctx, c, 3, 64); err == nil || !strings.Contains(err.Error(), "-tags rnet_lockcount") {
		t.Errorf("counting ping with an untagged build: %v, %v; want an error naming the tag", got, err)
	}
}
