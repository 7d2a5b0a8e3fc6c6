package main

import (
	"encoding/xml"
	"slices"
	"strings"
	"testing"
)

func TestParsers(t *testing.T) {
	us, err := parseRstream("name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\ncustom    64k     300     1       37m         2.32s      0.14    3873.00\n")
	if err != nil || us != 3873 {
		t.Errorf("parseRstream = %v, %v", us, err)
	}
	if _, err := parseRstream("rconnect: Connection refused\n"); err == nil {
		t.Error("parseRstream accepted an error")
	}
	out := " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n 65536      1000             52.14              31.31  \t\t   0.000501\n------\n"
	f, err := parsePerftest(out)
	if err != nil || f[3] != "31.31" {
		t.Errorf("parsePerftest = %q, %v", f, err)
	}
	if _, err := parsePerftest("Couldn't connect to 10.77.0.2:18515\n"); err == nil || !refused("Couldn't connect to 10.77.0.2:18515") {
		t.Error("perftest refusal not recognised")
	}
}

func sample() *Report {
	r := &Report{Runs: 3, Server: "10.77.0.2", Client: "10.77.0.1", Devices: "rxe0 → rxe1", Throughput: throughputSizes, Latency: latencySizes}
	for i, tr := range transportOrder {
		for _, s := range throughputSizes {
			v := float64(s) / 1000 * float64(i+1)
			r.Series = append(r.Series, &Series{Transport: tr, Kind: Throughput, Size: s, Runs: []float64{v}, Median: v})
		}
		for _, s := range latencySizes {
			v := 10 + float64(s)/100*float64(i+1)
			r.Series = append(r.Series, &Series{Transport: tr, Kind: Latency, Size: s, Runs: []float64{v}, Median: v})
			r.Extra = append(r.Extra, &Series{Transport: tr, Kind: LatencyP50, Size: s, Runs: []float64{v}, Median: v})
		}
	}
	return r
}

func TestTable(t *testing.T) {
	var b strings.Builder
	sample().WriteTable(&b)
	s := b.String()
	// Throughput is size/1000 times the transport's place in
	// transportOrder: rnet/rstream 1/3, rnet/rstream-block 1/4,
	// rnet-poll/rstream 2/3, in that order on every row.
	for _, want := range []string{"medians of 3 runs", "64K", "0.33x       0.25x        0.67x", "rnet/rstr-b", "poll/rstream", "rnet/ib_bw", "rnet/tcp", "rstrb-mean"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
}

func TestSVGIsWellFormed(t *testing.T) {
	var b strings.Builder
	if err := sample().WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(strings.NewReader(b.String()))
	lines := 0
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("SVG is not well-formed XML: %v", err)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	if lines != 2*len(transportOrder) {
		t.Errorf("%d lines, want one per transport in each of two panels (%d)", lines, 2*len(transportOrder))
	}
	// An empty report still draws.
	b.Reset()
	if err := (&Report{}).WriteSVG(&b); err != nil || !strings.Contains(b.String(), "no data") {
		t.Errorf("empty report: %v", err)
	}
}

// Each run starts with the next transport, and every run still measures
// each transport once.
func TestRotated(t *testing.T) {
	list := []string{"a", "b", "c"}
	for k, want := range [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}} {
		if got := rotated(list, k); !slices.Equal(got, want) {
			t.Errorf("rotated(%v, %d) = %v, want %v", list, k, got, want)
		}
	}
	if got := rotated([]string(nil), 2); len(got) != 0 {
		t.Errorf("rotated(nil) = %v", got)
	}
	if list[0] != "a" {
		t.Errorf("rotated changed its argument: %v", list)
	}
}

func TestParseFloor(t *testing.T) {
	out := `{"variant":"c","p50_us":40.5,"p99_us":150,"mean_us":43.5,"max_us":1400,"switches":9}
{"variant":"go","p50_us":41.7,"p99_us":355,"mean_us":56.8,"max_us":4711,"switches":279}
{"variant":"go-cgo","p50_us":42.3,"p99_us":300,"mean_us":54.1,"max_us":4116,"switches":523}
`
	got, err := parseFloor(out)
	if err != nil {
		t.Fatal(err)
	}
	if got[FloorC][Latency] != 43.5 || got[FloorGo][Latency] != 54.1 || got[FloorGo][LatencyP50] != 42.3 {
		t.Errorf("parseFloor = %v", got)
	}
	// The pure-Go variant is not reported, but the two that are must be there.
	if _, err := parseFloor(strings.Join(strings.Split(out, "\n")[1:], "\n")); err == nil {
		t.Error("output without the C twin accepted")
	}
	if _, err := parseFloor("gofloor: mmap: no such device\n"); err == nil {
		t.Error("an error message accepted")
	}
	if _, err := parseFloor(`{"variant":"c","p50_us":1,"mean_us":1` + "\n"); err == nil {
		t.Error("truncated JSON accepted")
	}
}

func TestTableFloor(t *testing.T) {
	r := sample()
	var b strings.Builder
	r.WriteTable(&b)
	if strings.Contains(b.String(), "Go runtime floor") {
		t.Errorf("floor section without floor figures:\n%s", b.String())
	}
	for name, v := range map[string][]float64{FloorC: {40, 44}, FloorGo: {44, 55}} {
		r.Extra = append(r.Extra,
			&Series{Transport: name, Kind: Latency, Runs: []float64{v[1]}, Median: v[1]},
			&Series{Transport: name, Kind: LatencyP50, Runs: []float64{v[0]}, Median: v[0]})
	}
	r.Extra = append(r.Extra, &Series{Transport: "x", Kind: Latency, Failures: 1})
	b.Reset()
	r.WriteTable(&b)
	// go/c: 55/44 on means, 44/40 on medians.
	for _, want := range []string{"Go runtime floor", "1.25x", "1.10x", "x latency: 1 of 1 runs failed"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestWorkTable: the per-message work of the throughput tests is printed
// for the small sizes, "-" where a transport has no such figure.
func TestWorkTable(t *testing.T) {
	r := sample()
	for _, s := range throughputSizes {
		r.Extra = append(r.Extra,
			&Series{Transport: RNet, Kind: SyscallsPerMsg, Size: s, Runs: []float64{0.5}, Median: 0.5},
			&Series{Transport: RNet, Kind: CgoPerMsg, Size: s, Runs: []float64{1.25}, Median: 1.25},
			&Series{Transport: RNet, Kind: CompletionsPerMsg, Size: s, Runs: []float64{1.5}, Median: 1.5},
			&Series{Transport: RStream, Kind: SyscallsPerMsg, Size: s, Runs: []float64{2}, Median: 2})
	}
	var b strings.Builder
	r.WriteTable(&b)
	s := b.String()
	i := strings.Index(s, "Client work per message")
	if i < 0 {
		t.Fatalf("no work table:\n%s", s)
	}
	work := s[i:]
	for _, want := range []string{"0.50 / 1.25 / 1.50", "2.00 / - / -", "\n    4K "} {
		if !strings.Contains(work, want) {
			t.Errorf("work table lacks %q:\n%s", want, work)
		}
	}
	if strings.Contains(work, "\n   64K ") {
		t.Errorf("work table has a row for 64K, where setup would count:\n%s", work)
	}
}
