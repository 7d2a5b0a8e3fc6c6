package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// colors of the transports' lines: a polling and a sleeping variant share
// a colour, the sleeping one dashed.
var colors = map[string]string{RNet: "#d62728", RNetPoll: "#d62728", RStream: "#1f77b4", RStreamBlock: "#1f77b4", Verbs: "#2ca02c", TCP: "#7f7f7f"}

var dashed = map[string]bool{RNet: true, RStreamBlock: true}

var labels = map[string]string{
	RNet: "rnet (default: spin, then sleep)", RNetPoll: "rnet, polling", RStream: "rstream (C rsocket, polling)",
	RStreamBlock: "rstream -T b (spin, then sleep)", Verbs: "ib_write_bw / ib_write_lat", TCP: "TCP (Go)",
}

// stroke is the SVG stroke attributes of a transport's line.
func stroke(t string) string {
	a := fmt.Sprintf(`stroke="%s" stroke-width="2.5"`, colors[t])
	if dashed[t] {
		a += ` stroke-dasharray="7,4"`
	}
	return a
}

// WriteSVG draws two panels, throughput against message size and mean round
// trip against message size, one line per transport, both axes logarithmic.
func (r *Report) WriteSVG(w io.Writer) error {
	const W, H = 1000, 490
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" text-anchor="middle">%s</text>`+"\n", W/2,
		esc(fmt.Sprintf("rnet vs rstream, ib_write and TCP — %s, medians of %d runs", r.Devices, r.Runs)))
	r.panel(&b, 60, 50, 400, 330, Throughput, r.Throughput, "throughput (MB/s)")
	r.panel(&b, 560, 50, 400, 330, Latency, r.Latency, "mean round trip (µs)")
	// Legend, in rows that fit the width.
	x, y := 70, 436
	for _, t := range transportOrder {
		wide := 34 + 7*len(labels[t]) + 24
		if x+wide > W-20 {
			x, y = 70, y+22
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" %s/>`, x, y, x+28, y, stroke(t))
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", x+34, y+4, esc(labels[t]))
		x += wide
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Report) panel(b *strings.Builder, x0, y0, w, h int, kind string, sizes []int, ylabel string) {
	var lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range r.Series {
		if s.Kind == kind && len(s.Runs) > 0 && s.Median > 0 {
			lo, hi = math.Min(lo, s.Median), math.Max(hi, s.Median)
		}
	}
	if math.IsInf(lo, 0) || len(sizes) == 0 {
		fmt.Fprintf(b, `<text x="%d" y="%d">no data</text>`, x0+w/2, y0+h/2)
		return
	}
	ylo, yhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if yhi == ylo {
		yhi++
	}
	xlo, xhi := math.Log2(float64(sizes[0])), math.Log2(float64(sizes[len(sizes)-1]))
	if xhi == xlo {
		xhi++
	}
	px := func(size int) float64 { return float64(x0) + (math.Log2(float64(size))-xlo)/(xhi-xlo)*float64(w) }
	py := func(v float64) float64 { return float64(y0+h) - (math.Log10(v)-ylo)/(yhi-ylo)*float64(h) }
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", x0, y0, w, h)
	// Y grid: decades, with 2 and 5 as minor lines.
	for e := ylo; e <= yhi; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if math.Log10(v) > yhi+1e-9 {
				break
			}
			y := py(v)
			stroke := "#eee"
			if m == 1 {
				stroke = "#ccc"
			}
			fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`, x0, y, x0+w, y, stroke)
			fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#444">%s</text>`+"\n", x0-6, y+4, tick(v))
		}
	}
	for _, s := range sizes {
		x := px(s)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`, x, y0, x, y0+h)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%s</text>`+"\n", x, y0+h+16, axisSize(s))
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">message size (bytes per write)</text>`+"\n", x0+w/2, y0+h+36)
	fmt.Fprintf(b, `<text transform="translate(%d,%d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", x0-44, y0+h/2, esc(ylabel))
	for _, t := range transportOrder {
		var pts []string
		for _, s := range sizes {
			v := r.get(t, kind, s)
			if math.IsNaN(v) || v <= 0 {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s), py(v)))
		}
		if len(pts) == 0 {
			continue
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" %s/>`+"\n", strings.Join(pts, " "), stroke(t))
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3.5" fill="%s"/>`, xy[0], xy[1], colors[t])
		}
		b.WriteString("\n")
	}
}

func tick(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", v)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// axisSize is 64 B, 1 KiB, 1 MiB.
func axisSize(n int) string {
	s := sizeName(n)
	if strings.HasSuffix(s, "K") || strings.HasSuffix(s, "M") {
		return s + "iB"
	}
	return s + " B"
}
