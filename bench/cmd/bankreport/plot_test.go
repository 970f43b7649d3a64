package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/shiftlock/shiftlock-proxy/bank"
)

// TestGoodputBarsReadAtAGlance: make demo's goodput chart once clipped its
// tallest bar at the frame, put its two bars at the far edges of the axis,
// and slanted the series names away from their bars. The chart must leave
// room above the longest bar and its whisker, keep the bars off the ends of
// their axis, write its labels level, and label every bar with its goodput
// and its ratio to the baseline (the RedLock series).
func TestGoodputBarsReadAtAGlance(t *testing.T) {
	run := func(series string, round int, goodput float64) *bank.Result {
		return &bank.Result{Run: round, Locker: series, Name: series, Mix: "smallbank", Skew: "hotspot:0.01:90",
			SkewDesc: "hotspot", Goodput: goodput, Types: map[string]*bank.Stats{"Balance": {Committed: 1}}}
	}
	gs := groupResults([]*bank.Result{
		run("redlock-1", 1, 2500), run("redlock-1", 2, 2532), run("redlock-1", 3, 2600),
		run("proxy-embedded", 1, 6400), run("proxy-embedded", 2, 6575), run("proxy-embedded", 3, 6900),
	})
	if len(gs) != 1 || len(gs[0].series) != 2 {
		t.Fatalf("groups: %+v", gs)
	}
	p, err := goodputPlot(gs[0])
	if err != nil {
		t.Fatal(err)
	}
	val, cat := &p.Y, &p.X
	if p.X.Label.Text == "committed transactions/s" {
		val, cat = &p.X, &p.Y
	}
	if longest := 6900.0; val.Max < 1.15*longest {
		t.Errorf("value axis ends at %.0f: the longest bar (with its whisker, %.0f) touches the frame", val.Max, longest)
	}
	if cat.Min > -0.5 || cat.Max < 1.5 {
		t.Errorf("category axis [%.2f, %.2f]: the two bars, at 0 and 1, sit at its ends", cat.Min, cat.Max)
	}
	c := vgsvg.New(5*vg.Inch, 4*vg.Inch)
	p.Draw(draw.New(c))
	var svg bytes.Buffer
	if _, err := c.WriteTo(&svg); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(svg.String(), "rotate(") {
		t.Error("a label is slanted")
	}
	var texts []string
	for _, m := range regexp.MustCompile(`<text[^>]*>([^<]*)</text>`).FindAllStringSubmatch(svg.String(), -1) {
		texts = append(texts, m[1])
	}
	all := strings.Join(texts, " | ")
	for _, want := range []string{"6575/s", "2.60x", "2532/s"} {
		if !strings.Contains(all, want) {
			t.Errorf("no label %q among %q", want, all)
		}
	}
}
