package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/shiftlock/shiftlock-proxy/internal/stats"
)

// One color per series, the same in every figure.
var seriesColors = map[string]color.Color{
	"redlock-rs":       color.RGBA{0x94, 0x67, 0xbd, 0xff},
	"redlock-1":        color.RGBA{0x1f, 0x77, 0xb4, 0xff},
	"redlock-3":        color.RGBA{0x9e, 0xc5, 0xe8, 0xff},
	"redlock-5":        color.RGBA{0x17, 0xbe, 0xcf, 0xff},
	"proxy":            color.RGBA{0xd6, 0x27, 0x28, 0xff},
	"proxy-3":          color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	"proxy-3-unrouted": color.RGBA{0xff, 0xbb, 0x78, 0xff},
	"proxy-embedded":   color.RGBA{0xff, 0x98, 0x96, 0xff},
	"proxy-fenced":     color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	"native":           color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	"native-fenced":    color.RGBA{0x98, 0xdf, 0x8a, 0xff},
	"none":             color.RGBA{0x7f, 0x7f, 0x7f, 0xff},
	"null":             color.RGBA{0xbc, 0xbd, 0x22, 0xff},
	"null-3":           color.RGBA{0xdb, 0xdb, 0x8d, 0xff},
}

func seriesColor(s string) color.Color {
	if c, ok := seriesColors[s]; ok {
		return c
	}
	return color.Black
}

// slug makes a skew spec a file-name part: zipf:0.99 -> zipf-0.99.
func slug(s string) string {
	return strings.NewReplacer(":", "-", "%", "pct", "/", "-", " ", "-").Replace(s)
}

// figureName is the PNG of group g.
func figureName(prefix string, g *group) string {
	name := prefix + slug(g.skew)
	if g.mix != "smallbank" {
		name = prefix + g.mix + "-" + slug(g.skew)
	}
	if g.setup != "" {
		name = prefix + slug(g.setup) + "-" + strings.TrimPrefix(name, prefix)
	}
	return name + ".png"
}

// drawGroup draws g as the paper's Fig. 11 does: the latency CDF of every
// series on the left, goodput bars on the right.
func drawGroup(g *group, path string) error {
	cdf, err := cdfPlot(g)
	if err != nil {
		return err
	}
	bars, err := goodputPlot(g)
	if err != nil {
		return err
	}
	const w, h = 11 * vg.Inch, 4 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Inch / 3, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	cs := plot.Align([][]*plot.Plot{{cdf, bars}}, tiles, dc)
	cdf.Draw(cs[0][0])
	bars.Draw(cs[0][1])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func cdfPlot(g *group) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Transaction latency CDF, " + g.title()
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "fraction of committed transactions"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	lo, hi := math.Inf(1), 0.0
	for _, s := range g.series {
		h := g.hist(s)
		if h == nil || h.TotalCount() == 0 {
			continue
		}
		var pts plotter.XYs
		total := float64(h.TotalCount())
		var cum int64
		for _, b := range h.Distribution() {
			if b.Count == 0 {
				continue
			}
			cum += b.Count
			x := float64(b.To) / 1000
			pts = append(pts, plotter.XY{X: max(x, 0.01), Y: float64(cum) / total})
		}
		if len(pts) == 0 {
			continue
		}
		lo, hi = min(lo, pts[0].X), max(hi, pts[len(pts)-1].X)
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = seriesColor(s)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s, l)
	}
	if hi > 0 {
		p.X.Min, p.X.Max = lo/1.2, hi*1.2
	}
	p.Add(plotter.NewGrid())
	return p, nil
}

// goodputPlot draws one horizontal bar per series, the first at the top,
// each labelled at its end with its goodput and its ratio to the baseline.
// Horizontal, so that every name sits level beside its own bar however many
// series a grid has; the value axis runs past the longest bar and its label,
// and the category axis half a bar past the outer bars, so nothing touches
// the frame.
func goodputPlot(g *group) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Goodput (median of runs)"
	p.X.Label.Text = "committed transactions/s"
	p.X.Tick.Marker = intTicks{}
	n := len(g.series)
	base := baselineSeries(g)
	var labels plotter.XYLabels
	top := 0.0
	for i, s := range g.series {
		y := float64(n - 1 - i)
		med := g.med(s, goodput)
		b, err := plotter.NewBarChart(plotter.Values{med}, vg.Points(22))
		if err != nil {
			return nil, err
		}
		b.Horizontal = true
		b.XMin = y
		b.Color = seriesColor(s)
		b.LineStyle.Width = 0
		p.Add(b)
		end := med
		if len(g.runs[s]) > 1 {
			// Whiskers: the lowest and highest run.
			lo, hi := math.Inf(1), 0.0
			for _, r := range g.runs[s] {
				lo, hi = min(lo, r.Goodput), max(hi, r.Goodput)
			}
			e, err := plotter.NewXErrorBars(errPoint{x: med, y: y, lo: med - lo, hi: hi - med})
			if err != nil {
				return nil, err
			}
			p.Add(e)
			end = hi
		}
		top = max(top, end)
		labels.XYs = append(labels.XYs, plotter.XY{X: end, Y: y})
		labels.Labels = append(labels.Labels, barLabel(g, s, base, med))
	}
	l, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = draw.XLeft
		l.TextStyle[i].YAlign = draw.YCenter
	}
	l.Offset = vg.Point{X: vg.Points(4)}
	p.Add(l)
	p.NominalY(reversed(g.series)...)
	// Room for the longest bar's label: about a third of the axis.
	p.X.Min, p.X.Max = 0, max(top, 1)*1.55
	p.Y.Min, p.Y.Max = -0.7, float64(n-1)+0.7
	grid := plotter.NewGrid()
	grid.Horizontal.Color = nil // lines through the bars would only cross them
	p.Add(grid)
	return p, nil
}

// baselineSeries is the RedLock series a group's other series are measured
// against, as the report's ratios are; "" if the group has none.
func baselineSeries(g *group) string {
	for _, s := range []string{"redlock-rs", "redlock-1", "redlock-3", "redlock-5"} {
		if len(g.runs[s]) > 0 {
			return s
		}
	}
	return ""
}

// barLabel is "6575/s, 2.60x": the median goodput and the median of the
// same-run ratios to the baseline (the ratio of the medians if no round
// has both).
func barLabel(g *group, s, base string, med float64) string {
	switch {
	case base == "":
		return fmt.Sprintf("%.0f/s", med)
	case s == base:
		return fmt.Sprintf("%.0f/s, baseline", med)
	}
	if rs := g.ratios(s, base, goodput); len(rs) > 0 {
		return fmt.Sprintf("%.0f/s, %.2fx", med, stats.Median(rs))
	}
	if b := g.med(base, goodput); b > 0 {
		return fmt.Sprintf("%.0f/s, %.2fx", med, med/b)
	}
	return fmt.Sprintf("%.0f/s", med)
}

func reversed(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[len(ss)-1-i] = s
	}
	return out
}

// errPoint is one bar's whisker.
type errPoint struct{ x, y, lo, hi float64 }

func (e errPoint) Len() int                      { return 1 }
func (e errPoint) XY(int) (float64, float64)     { return e.x, e.y }
func (e errPoint) XError(int) (float64, float64) { return e.lo, e.hi }
func figurePath(dir, prefix string, g *group) string {
	return filepath.Join(dir, figureName(prefix, g))
}

// intTicks are gonum's default ticks labelled as whole numbers.
type intTicks struct{}

func (intTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = fmt.Sprintf("%.0f", ts[i].Value)
		}
	}
	return ts
}
