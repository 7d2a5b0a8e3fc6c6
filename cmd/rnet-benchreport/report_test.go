package main

import (
	"encoding/json"
	"encoding/xml"
	"html"
	"os"
	"path/filepath"
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

// tableRows returns the rows of the table under the line that starts with
// title, each split into its fields, and fails unless every row is as wide
// as the header: the columns are right-aligned.
func tableRows(t *testing.T, report, title string) [][]string {
	t.Helper()
	_, rest, ok := strings.Cut(report, "\n"+title)
	if !ok {
		t.Fatalf("no table %q in:\n%s", title, report)
	}
	lines := strings.Split(rest, "\n")[1:]
	var rows [][]string
	for _, line := range lines {
		if line == "" {
			break
		}
		if len(line) != len(lines[0]) {
			t.Errorf("table %q: row %q is not as wide as its header %q", title, line, lines[0])
		}
		rows = append(rows, strings.Fields(line))
	}
	return rows
}

func TestTable(t *testing.T) {
	var b strings.Builder
	sample().WriteTable(&b)
	s := b.String()
	if !strings.Contains(s, "medians of 3 runs") {
		t.Errorf("no header:\n%s", s)
	}
	// Throughput is size/1000 times the transport's place in
	// transportOrder: rnet/rstream 1/3, rnet/rstream-block 1/4,
	// rnet-poll/rstream 2/3, in that order on every row.
	rows := tableRows(t, s, "Throughput, MB/s")
	if want := []string{"size", "rnet", "rnet-poll", "rstream", "rstream-b", "ib_write_bw", "tcp", "rnet/rstream", "rnet/rstr-b", "poll/rstream", "rnet/ib_bw", "rnet/tcp"}; !slices.Equal(rows[0], want) {
		t.Errorf("throughput header %q, want %q", rows[0], want)
	}
	if len(rows) != 1+len(throughputSizes) {
		t.Fatalf("%d throughput rows", len(rows))
	}
	for _, row := range rows[1:] {
		if !slices.Equal(row[7:10], []string{"0.33x", "0.25x", "0.67x"}) {
			t.Errorf("throughput row %q", row)
		}
	}
	if rows[4][0] != "64K" {
		t.Errorf("throughput row %q, want 64K first", rows[4])
	}
	rows = tableRows(t, s, "Round-trip latency")
	if len(rows) != 1+len(latencySizes) || rows[0][5] != "rstrb-mean" || len(rows[1]) != len(rows[0]) {
		t.Errorf("latency table %q", rows)
	}
}

func TestSVGIsWellFormed(t *testing.T) {
	var b strings.Builder
	if err := sample().WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	d := xml.NewDecoder(strings.NewReader(svg))
	lines, dashedLines := 0, 0
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("SVG is not well-formed XML: %v", err)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "path" {
			for _, a := range se.Attr {
				if a.Name.Local == "style" && strings.Contains(a.Value, "fill:none") && strings.Contains(a.Value, "stroke-width:1.8") {
					lines++
					if strings.Contains(a.Value, "stroke-dasharray") {
						dashedLines++
					}
				}
			}
		}
	}
	// One per transport in each of two panels, and its legend entry.
	if lines != 3*len(transportOrder) || dashedLines != 3*len(dashed) {
		t.Errorf("%d lines (%d dashed), want %d (%d)", lines, dashedLines, 3*len(transportOrder), 3*len(dashed))
	}
	for _, s := range []string{"throughput (MB/s)", "mean round trip (µs)", "message size (bytes per write)", "medians of 3 runs", "64 KiB", "1 MiB"} {
		if !strings.Contains(svg, s) {
			t.Errorf("SVG lacks %q", s)
		}
	}
	for _, tr := range transportOrder {
		if strings.Count(svg, ">"+html.EscapeString(labels[tr])+"<") != 1 {
			t.Errorf("SVG lacks one legend entry %q", labels[tr])
		}
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
	for _, want := range []string{"0.50 / 1.25 / 1.50", "2.00 / - / -"} {
		if !strings.Contains(work, want) {
			t.Errorf("work table lacks %q:\n%s", want, work)
		}
	}
	var sizes []string
	for _, row := range tableRows(t, s, "Client work per message")[1:] {
		sizes = append(sizes, row[0])
	}
	// Not 64K, where setup would count.
	if want := []string{"64", "1K", "4K"}; !slices.Equal(sizes, want) {
		t.Errorf("work table rows for %q, want %q:\n%s", sizes, want, work)
	}
}

// withTripWork adds rnet-poll's work per round trip at every latency size:
// 3 crossings in the timed runs; 3.5 crossings and 14 locks in the
// counting build's, 4 locks per crossing.
func withTripWork(r *Report) *Report {
	for _, s := range latencySizes {
		r.Extra = append(r.Extra,
			&Series{Transport: RNetPoll, Kind: CgoPerTrip, Size: s, Runs: []float64{3}, Median: 3},
			&Series{Transport: RNetPollCounting, Kind: CgoPerTrip, Size: s, Runs: []float64{3.5}, Median: 3.5},
			&Series{Transport: RNetPollCounting, Kind: LocksPerTrip, Size: s, Runs: []float64{14}, Median: 14})
	}
	return r
}

// TestTripWorkTable: rnet-poll's crossings and locks per round trip of the
// latency tests are a table after the Go floor's, one row per latency size,
// with locks per crossing from the counting build's two figures, and "-"
// where the report has no counting build's figures.
func TestTripWorkTable(t *testing.T) {
	const title = "Client work per round trip, latency tests (rnet-poll"
	var b strings.Builder
	sample().WriteTable(&b)
	if strings.Contains(b.String(), title) {
		t.Errorf("round-trip work table without its figures:\n%s", b.String())
	}

	r := withTripWork(sample())
	r.Extra = append(r.Extra,
		&Series{Transport: FloorC, Kind: Latency, Runs: []float64{40}, Median: 40},
		&Series{Transport: FloorGo, Kind: Latency, Runs: []float64{44}, Median: 44})
	b.Reset()
	r.WriteTable(&b)
	s := b.String()
	if floor, trips := strings.Index(s, "Go runtime floor"), strings.Index(s, title); floor < 0 || trips < floor {
		t.Errorf("the round-trip work table is not after the Go floor's:\n%s", s)
	}
	rows := tableRows(t, s, title)
	if want := []string{"size", "cgo", "counting-cgo", "locks", "locks/cgo"}; !slices.Equal(rows[0], want) {
		t.Errorf("header %q, want %q", rows[0], want)
	}
	var sizes []string
	for _, row := range rows[1:] {
		sizes = append(sizes, row[0])
		if want := []string{"3.00", "3.50", "14.0", "4.00"}; !slices.Equal(row[1:], want) {
			t.Errorf("row %q, want %q after the size", row, want)
		}
	}
	if want := []string{"64", "1K", "4K", "64K"}; !slices.Equal(sizes, want) {
		t.Errorf("rows for %q, want %q", sizes, want)
	}

	// Without the counting build: the timed runs' crossings alone.
	r = sample()
	r.Extra = append(r.Extra, &Series{Transport: RNetPoll, Kind: CgoPerTrip, Size: 64, Runs: []float64{3}, Median: 3})
	b.Reset()
	r.WriteTable(&b)
	rows = tableRows(t, b.String(), title)
	if len(rows) != 2 || !slices.Equal(rows[1], []string{"64", "3.00", "-", "-", "-"}) {
		t.Errorf("rows without the counting build %q", rows)
	}
}

// TestTripWorkInBenchJSON: the figures per round trip are kept in
// bench.json's extra series, and its table is printed again from it.
func TestTripWorkInBenchJSON(t *testing.T) {
	dir := t.TempDir()
	var first strings.Builder
	if err := write(withTripWork(sample()), dir, &first); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "bench.json"))
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Extra []Series `json:"extra"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	kept := map[string]int{}
	for _, e := range raw.Extra {
		if e.Kind == CgoPerTrip || e.Kind == LocksPerTrip {
			kept[e.Transport+" "+e.Kind]++
		}
	}
	for _, k := range []string{RNetPoll + " " + CgoPerTrip, RNetPollCounting + " " + CgoPerTrip, RNetPollCounting + " " + LocksPerTrip} {
		if kept[k] != len(latencySizes) {
			t.Errorf("bench.json keeps %d extra series %q, want one per latency size (%d)", kept[k], k, len(latencySizes))
		}
	}
	var again strings.Builder
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	r.WriteTable(&again)
	if rows := tableRows(t, again.String(), "Client work per round trip"); len(rows) != 1+len(latencySizes) || rows[1][3] != "14.0" {
		t.Errorf("replotted round-trip work table %q", rows)
	}
}

func TestUnitOf(t *testing.T) {
	for kind, want := range map[string]string{
		Throughput: "MB/s", Latency: "µs", LatencyP50: "µs",
		SyscallsPerMsg: "per message", CgoPerMsg: "per message", CompletionsPerMsg: "per message",
		CgoPerTrip: "per round trip", LocksPerTrip: "per round trip",
	} {
		if got, _ := unitOf(kind); got != want {
			t.Errorf("unitOf(%q) = %q, want %q", kind, got, want)
		}
	}
}

// TestControlLine: with the control path's segments in Extra, the table
// says how many client runs saw none, the sum and the most; without them it
// says nothing.
func TestControlLine(t *testing.T) {
	const title = "Control path (-server-exec)"
	var b strings.Builder
	sample().WriteTable(&b)
	if strings.Contains(b.String(), title) {
		t.Errorf("control line without its figures:\n%s", b.String())
	}
	r := sample()
	r.Extra = append(r.Extra,
		&Series{Transport: RNet, Kind: ControlSegments, Size: 64, Runs: []float64{0, 0}},
		&Series{Transport: RStream, Kind: ControlSegments, Size: 1 << 20, Runs: []float64{0, 6}})
	b.Reset()
	r.WriteTable(&b)
	if want := title + " during the RDMA measurements: 3 of 4 client runs saw no TCP segment on the client's host before their result; 6 segments in all, at most 6 in one run"; !strings.Contains(b.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, b.String())
	}
}
