package main

import (
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// One color per lock, the same in every plot.
var lockColors = map[string]color.Color{
	"shiftlock":           color.RGBA{0xd6, 0x27, 0x28, 0xff},
	"shiftlock-nobump":    color.RGBA{0xff, 0x98, 0x96, 0xff},
	"shiftlock-pipelined": color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	"shiftlock-artifact":  color.RGBA{0xe3, 0x77, 0xc2, 0xff},
	"cas-nb":              color.RGBA{0x7f, 0x7f, 0x7f, 0xff},
	"cas-b":               color.RGBA{0x1f, 0x77, 0xb4, 0xff},
	"dslr":                color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	"mcs":                 color.RGBA{0x94, 0x67, 0xbd, 0xff},
	"fisslock":            color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	"parlock":             color.RGBA{0x17, 0xbe, 0xcf, 0xff},
	"citron":              color.RGBA{0xd6, 0x27, 0x28, 0xff},
}

var verbColors = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, // atomics
	color.RGBA{0xff, 0x7f, 0x0e, 0xff}, // READs
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, // WRITEs
	color.RGBA{0x94, 0x67, 0xbd, 0xff}, // SENDs
}

func plotCmd(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("lockbench plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	csvPath := fs.String("csv", "", "results CSV written by lockbench -csv")
	out := fs.String("out", ".", "directory for the PNG files")
	prefix := fs.String("prefix", "micro-", "file name prefix")
	label := fs.String("label", "", "plot only rows with this label (default: the label of the last row)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *csvPath == "" {
		return errors.New("plot: -csv is required")
	}
	rs, _, err := gridRows(*csvPath, *label)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	files, err := drawAll(aggregate(rs), *out, *prefix)
	for _, f := range files {
		fmt.Fprintln(stderr, "wrote", f)
	}
	return err
}

// drawAll draws every figure the cells allow and returns the files written.
func drawAll(cells map[cellID]*cell, dir, prefix string) ([]string, error) {
	var files []string
	save := func(p *plot.Plot, w vg.Length, name string) error {
		path := filepath.Join(dir, prefix+name+".png")
		if err := p.Save(w, 4*vg.Inch, path); err != nil {
			return err
		}
		files = append(files, path)
		return nil
	}
	if p := sweepPlot(cells); p != nil {
		if err := save(p, 8*vg.Inch, "capsweep"); err != nil {
			return files, err
		}
	}
	for _, s := range setups(cells) {
		if sweepOnly(cells, s) {
			continue
		}
		if p := goodputPlot(cells, s); p != nil {
			if err := save(p, 9*vg.Inch, "goodput-"+s); err != nil {
				return files, err
			}
		}
		if p := latencyPlot(cells, s); p != nil {
			if err := save(p, 9*vg.Inch, "p99-"+s); err != nil {
				return files, err
			}
		}
		if p := verbsPlot(cells, s); p != nil {
			if err := save(p, 9*vg.Inch, "verbs-"+s); err != nil {
				return files, err
			}
		}
		if p := failurePlot(cells, s); p != nil {
			if err := save(p, 6*vg.Inch, "failure-"+s); err != nil {
				return files, err
			}
		}
	}
	return files, nil
}

// locksIn lists the locks present in setup s, in lockKinds order.
func locksIn(cells map[cellID]*cell, s string, fail bool) []string {
	seen := map[string]bool{}
	for id := range cells {
		if id.setup == s && id.recovery == fail {
			seen[id.lock] = true
		}
	}
	var out, extra []string
	for _, k := range lockKinds {
		if seen[k] {
			out = append(out, k)
			delete(seen, k)
		}
	}
	// Variants by parameter (shiftlock-pipelined-n64) after the kinds.
	for k := range seen {
		extra = append(extra, k)
	}
	sort.Strings(extra)
	return append(out, extra...)
}

// colorOf is a lock's color in every plot; a variant by parameter takes
// its kind's, darkened.
func colorOf(lock string) color.Color {
	if c, ok := lockColors[lock]; ok {
		return c
	}
	for k, c := range lockColors {
		if strings.HasPrefix(lock, k+"-n") {
			r, g, b, _ := c.RGBA()
			return color.RGBA{uint8(r >> 9), uint8(g >> 9), uint8(b >> 9), 0xff}
		}
	}
	return color.RGBA{0x40, 0x40, 0x40, 0xff}
}

type group struct{ workload, keys string }

func (g group) String() string { return g.workload + " " + keysShort(g.keys) }

func groupsIn(cells map[cellID]*cell, s string) []group {
	var gs []group
	for _, w := range workloadOrder {
		for _, k := range keysOf(cells) {
			for id := range cells {
				if id.setup == s && id.workload == w && id.keys == k && !id.recovery {
					gs = append(gs, group{w, k})
					break
				}
			}
		}
	}
	return gs
}

// groupedBars draws one bar per lock in each group; value picks the
// quantity, and NaN leaves a gap.
func groupedBars(p *plot.Plot, gs []string, locks []string, floor float64, value func(lock string, i int) float64) error {
	w := vg.Points(max(4, 60/float64(len(locks))))
	for li, l := range locks {
		vals := make(plotter.Values, len(gs))
		for i := range gs {
			v := value(l, i)
			if math.IsNaN(v) || v < floor {
				v = floor
			}
			vals[i] = v
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.Color = colorOf(l)
		bars.LineStyle.Width = 0
		bars.Offset = w * (vg.Length(li) - vg.Length(len(locks)-1)/2)
		p.Add(bars)
		p.Legend.Add(l, bars)
	}
	p.NominalX(gs...)
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	headroom(p)
	return nil
}

// goodputPlot is Fig. 4: goodput of every lock per workload and key
// distribution, medians of the runs.
func goodputPlot(cells map[cellID]*cell, s string) *plot.Plot {
	gs := groupsIn(cells, s)
	locks := locksIn(cells, s, false)
	if len(gs) == 0 || len(locks) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Goodput, %s (median of runs)", s)
	p.Y.Label.Text = "K acquire-release cycles/s"
	names := make([]string, len(gs))
	for i, g := range gs {
		names[i] = g.String()
	}
	_ = groupedBars(p, names, locks, 0, func(l string, i int) float64 {
		c := find(cells, s, l, gs[i].workload, gs[i].keys)
		if c == nil {
			return math.NaN()
		}
		return c.med.Goodput / 1000
	})
	return p
}

// latencyPlot is Fig. 5's tail: p99 acquire latency of writers and readers
// on the skewed workloads, log scale.
func latencyPlot(cells map[cellID]*cell, s string) *plot.Plot {
	type series struct {
		g      group
		writer bool
	}
	var ss []series
	for _, g := range groupsIn(cells, s) {
		if g.keys == "uniform" {
			continue
		}
		if g.workload != "RO" {
			ss = append(ss, series{g, true})
		}
		ss = append(ss, series{g, false})
	}
	locks := locksIn(cells, s, false)
	if len(ss) == 0 || len(locks) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("p99 acquire latency, skewed keys, %s (median of runs)", s)
	p.Y.Label.Text = "µs (log)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	names := make([]string, len(ss))
	for i, x := range ss {
		who := "readers"
		if x.writer {
			who = "writers"
		}
		names[i] = x.g.String() + " " + who
	}
	// gonum bars start at zero, which a log axis cannot show: one marker
	// per lock instead, spread across the group like a bar would be.
	for li, l := range locks {
		var pts plotter.XYs
		for i := range ss {
			c := find(cells, s, l, ss[i].g.workload, ss[i].g.keys)
			if c == nil {
				continue
			}
			v := c.med.RP99
			if ss[i].writer {
				v = c.med.WP99
			}
			if v > 0 {
				pts = append(pts, plotter.XY{X: float64(i) + 0.7*(float64(li)/float64(max(1, len(locks)-1))-0.5), Y: v})
			}
		}
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil
		}
		sc.Color = colorOf(l)
		sc.Shape = draw.BoxGlyph{}
		sc.Radius = vg.Points(4)
		p.Add(sc)
		p.Legend.Add(l, sc)
	}
	p.NominalX(names...)
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	p.Y.Max *= 4 // room for the legend on the log axis
	return p
}

// verbsPlot is Fig. 6: verbs per acquire-release cycle by kind, stacked,
// for the skewed WI and RI workloads.
func verbsPlot(cells map[cellID]*cell, s string) *plot.Plot {
	type slot struct {
		lock string
		c    *cell
	}
	var slots []slot
	var names []string
	for _, w := range []string{"WI", "RI"} {
		for _, l := range locksIn(cells, s, false) {
			var c *cell
			for _, k := range keysOf(cells) {
				if strings.HasPrefix(k, "zipf") {
					c = find(cells, s, l, w, k)
				}
			}
			if c != nil {
				slots = append(slots, slot{l, c})
				names = append(names, shortLock(l)+"\n"+w)
			}
		}
	}
	if len(slots) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Verbs per acquire-release cycle, Zipf keys, %s (median of runs)", s)
	p.Y.Label.Text = "verbs / cycle"
	kinds := []struct {
		name string
		get  func(*result) float64
	}{
		{"atomics", func(r *result) float64 { return r.Atomics }},
		{"READs", func(r *result) float64 { return r.Reads }},
		{"WRITEs", func(r *result) float64 { return r.Writes }},
		{"SENDs", func(r *result) float64 { return r.Sends }},
	}
	var below *plotter.BarChart
	for ki, k := range kinds {
		vals := make(plotter.Values, len(slots))
		for i, sl := range slots {
			vals[i] = k.get(&sl.c.med)
		}
		b, err := plotter.NewBarChart(vals, vg.Points(18))
		if err != nil {
			return nil
		}
		b.Color = verbColors[ki]
		b.LineStyle.Width = 0
		if below != nil {
			b.StackOn(below)
		}
		below = b
		p.Add(b)
		p.Legend.Add(k.name, b)
	}
	p.NominalX(names...)
	p.X.Tick.Label.Font.Size = vg.Points(8)
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	headroom(p)
	return p
}

func shortLock(l string) string {
	switch l {
	case "shiftlock":
		return "SL"
	case "shiftlock-nobump":
		return "SL-nb"
	case "shiftlock-pipelined":
		return "SL-pl"
	case "shiftlock-artifact":
		return "SL-art"
	}
	return strings.ToUpper(l)
}

// failurePlot is Fig. 13: goodput against the client failure rate for the
// locks that recover (log x), with the failure-free goodput as a dashed
// line.
func failurePlot(cells map[cellID]*cell, s string) *plot.Plot {
	locks := locksIn(cells, s, true)
	if len(locks) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Goodput under client failures, %s", s)
	p.X.Label.Text = "failure rate p (log)"
	p.Y.Label.Text = "K cycles/s"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	var xmin, xmax = math.Inf(1), math.Inf(-1)
	for _, l := range locks {
		var pts plotter.XYs
		var base *cell
		for id, c := range cells {
			if id.setup != s || id.lock != l || !id.recovery {
				continue
			}
			if id.fail == 0 {
				base = c
				continue
			}
			pts = append(pts, plotter.XY{X: id.fail, Y: c.med.Goodput / 1000})
			xmin, xmax = math.Min(xmin, id.fail), math.Max(xmax, id.fail)
		}
		sort.Slice(pts, func(i, j int) bool { return pts[i].X < pts[j].X })
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil
		}
		line.Color, points.Color = colorOf(l), colorOf(l)
		points.Shape = draw.CircleGlyph{}
		p.Add(line, points)
		p.Legend.Add(l, line, points)
		if base != nil {
			f := plotter.NewFunction(func(float64) float64 { return base.med.Goodput / 1000 })
			f.Color = colorOf(l)
			f.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(f)
			p.Legend.Add(l+", p = 0", f)
		}
	}
	p.Y.Min = 0
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	headroom(p)
	p.X.Min, p.X.Max = xmin/2, xmax*2
	return p
}

// headroom raises a linear y axis so that the legend, top right, does not
// cover the data.
func headroom(p *plot.Plot) {
	p.Y.Max *= 1.35
	p.X.Min -= 0.5
	p.X.Max += 0.5
}

// sweepOnly reports a setup that only holds a point of the cap sweep.
func sweepOnly(cells map[cellID]*cell, s string) bool {
	return len(groupsIn(cells, s)) == 1 && strings.Contains(s, "-cap") && len(locksIn(cells, s, true)) == 0 &&
		find(cells, s, "shiftlock", "WI", "uniform") == nil
}

// sweepSetups lists the tcpfab setups that ran Zipf WI, by cap, uncapped
// last.
func sweepSetups(cells map[cellID]*cell) []string {
	type sc struct {
		s   string
		cap float64
	}
	var out []sc
	for _, s := range setups(cells) {
		if !strings.HasPrefix(s, "tcpfab") {
			continue
		}
		for _, l := range lockKinds {
			if c := find(cells, s, l, "WI", zipfKeys(cells)); c != nil {
				capv := c.med.IOPSCap
				if capv == 0 {
					capv = math.Inf(1)
				}
				out = append(out, sc{s, capv})
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].cap < out[j].cap })
	names := make([]string, len(out))
	for i, x := range out {
		names[i] = x.s
	}
	return names
}

// sweepPlot is Zipf WI goodput on a real memnode at each IOPS cap.
func sweepPlot(cells map[cellID]*cell) *plot.Plot {
	ss := sweepSetups(cells)
	if len(ss) < 2 {
		return nil
	}
	var locks []string
	for _, l := range lockKinds {
		for _, s := range ss {
			if find(cells, s, l, "WI", zipfKeys(cells)) != nil {
				locks = append(locks, l)
				break
			}
		}
	}
	p := plot.New()
	p.Title.Text = "Goodput, Zipf WI, real memnode, by memnode IOPS cap (median of runs)"
	p.Y.Label.Text = "K acquire-release cycles/s"
	_ = groupedBars(p, ss, locks, 0, func(l string, i int) float64 {
		c := find(cells, ss[i], l, "WI", zipfKeys(cells))
		if c == nil {
			return math.NaN()
		}
		return c.med.Goodput / 1000
	})
	return p
}
