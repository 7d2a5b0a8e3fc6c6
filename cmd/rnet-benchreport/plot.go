package main

import (
	"fmt"
	"image/color"
	"io"
	"math"

	"github.com/rnet-dev/rnet/internal/bytesize"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// colors of the transports' lines: a polling and a sleeping variant share
// a colour, the sleeping one dashed.
var colors = map[string]color.RGBA{
	RNet: rgb(0xd62728), RNetPoll: rgb(0xd62728), RStream: rgb(0x1f77b4), RStreamBlock: rgb(0x1f77b4),
	Verbs: rgb(0x2ca02c), TCP: rgb(0x7f7f7f),
}

var dashed = map[string]bool{RNet: true, RStreamBlock: true}

var labels = map[string]string{
	RNet: "rnet (default: spin, then sleep)", RNetPoll: "rnet, polling", RStream: "rstream (C rsocket, polling)",
	RStreamBlock: "rstream -T b (spin, then sleep)", Verbs: "ib_write_bw / ib_write_lat", TCP: "TCP (Go)",
}

func rgb(v uint32) color.RGBA {
	return color.RGBA{R: uint8(v >> 16), G: uint8(v >> 8), B: uint8(v), A: 0xff}
}

// lineStyle is a transport's line.
func lineStyle(t string) draw.LineStyle {
	s := draw.LineStyle{Color: colors[t], Width: vg.Points(1.8)}
	if dashed[t] {
		s.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	}
	return s
}

// The SVG's size, and the heights of its title and legend bands.
const (
	svgWidth     = vg.Length(750) // points
	svgHeight    = vg.Length(370)
	titleHeight  = vg.Length(28)
	legendHeight = vg.Length(48)
)

// WriteSVG draws two panels, throughput against message size and mean round
// trip against message size, one line per transport, both axes logarithmic,
// under a title and over one legend.
func (r *Report) WriteSVG(w io.Writer) error {
	// Sans serif, as the hand-drawn plot had; plot's own default is serif.
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
	plotter.DefaultFont = plot.DefaultFont
	c := vgsvg.New(svgWidth, svgHeight)
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(rectangle(dc.Rectangle))

	title := text.Style{Font: font.From(plot.DefaultFont, 13), Color: color.Black, XAlign: draw.XCenter, YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
	dc.FillText(title, vg.Point{X: dc.Center().X, Y: dc.Max.Y - 8},
		fmt.Sprintf("rnet vs rstream, ib_write and TCP — %s, medians of %d runs", r.Devices, r.Runs))

	panels := dc
	panels.Max.Y -= titleHeight
	panels.Min.Y += legendHeight + 8 // clear of the axes' labels
	plots := [][]*plot.Plot{{
		r.panel(Throughput, r.Throughput, "throughput (MB/s)"),
		r.panel(Latency, r.Latency, "mean round trip (µs)"),
	}}
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(28), PadLeft: vg.Points(6), PadRight: vg.Points(10)}
	canvases := plot.Align(plots, tiles, panels)
	for i, p := range plots[0] {
		p.Draw(canvases[0][i])
	}

	// The legend: three columns of two entries, across the bottom.
	band := dc
	band.Max.Y = dc.Min.Y + legendHeight
	cols := draw.Tiles{Rows: 1, Cols: 3, PadLeft: vg.Points(40), PadX: vg.Points(10)}
	for col := range 3 {
		l := plot.NewLegend()
		l.Top, l.Left = true, true
		l.TextStyle.Font.Size = vg.Points(10)
		l.ThumbnailWidth = vg.Points(26)
		l.Padding = vg.Points(5)
		for _, t := range transportOrder[2*col : 2*col+2] {
			l.Add(labels[t], &plotter.Line{LineStyle: lineStyle(t)})
		}
		l.Draw(cols.At(band, col, 0))
	}
	_, err := c.WriteTo(w)
	return err
}

func rectangle(r vg.Rectangle) vg.Path {
	var p vg.Path
	p.Move(r.Min)
	p.Line(vg.Point{X: r.Max.X, Y: r.Min.Y})
	p.Line(r.Max)
	p.Line(vg.Point{X: r.Min.X, Y: r.Max.Y})
	p.Close()
	return p
}

// panel plots one kind of measurement: a line per transport that has any.
func (r *Report) panel(kind string, sizes []int, ylabel string) *plot.Plot {
	p := plot.New()
	p.X.Label.Text = "message size (bytes per write)"
	p.Y.Label.Text = ylabel
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range r.Series {
		if s.Kind == kind && len(s.Runs) > 0 && s.Median > 0 {
			lo, hi = math.Min(lo, s.Median), math.Max(hi, s.Median)
		}
	}
	if math.IsInf(lo, 0) || len(sizes) == 0 {
		p.Title.Text = ylabel + ": no data"
		return p
	}
	// Whole decades on y, and a little room beside the first and last size.
	p.Y.Scale, p.X.Scale = plot.LogScale{}, plot.LogScale{}
	p.Y.Min, p.Y.Max = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	if p.Y.Max == p.Y.Min {
		p.Y.Max *= 10
	}
	p.X.Min, p.X.Max = float64(sizes[0])/1.25, float64(sizes[len(sizes)-1])*1.25
	p.Y.Tick.Marker = plot.TickerFunc(decadeTicks)
	var xt plot.ConstantTicks
	for _, s := range sizes {
		xt = append(xt, plot.Tick{Value: float64(s), Label: bytesize.Format(uint64(s))})
	}
	p.X.Tick.Marker = xt
	grid := plotter.NewGrid()
	grid.Vertical.Color, grid.Horizontal.Color = color.Gray{Y: 0xe8}, color.Gray{Y: 0xd8}
	p.Add(grid)
	for _, t := range transportOrder {
		var xys plotter.XYs
		for _, s := range sizes {
			if v := r.get(t, kind, s); !math.IsNaN(v) && v > 0 {
				xys = append(xys, plotter.XY{X: float64(s), Y: v})
			}
		}
		if len(xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			continue // only non-finite values fail, and none come here
		}
		line.LineStyle = lineStyle(t)
		points.GlyphStyle = draw.GlyphStyle{Color: colors[t], Radius: vg.Points(2.6), Shape: draw.CircleGlyph{}}
		p.Add(line, points)
	}
	return p
}

// decadeTicks marks 1, 2 and 5 of every decade from min to max, labelled.
func decadeTicks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		for _, m := range []float64{1, 2, 5} {
			if v := m * math.Pow(10, e); v >= min*(1-1e-9) && v <= max*(1+1e-9) {
				ticks = append(ticks, plot.Tick{Value: v, Label: tick(v)})
			}
		}
	}
	return ticks
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
