package main

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/shiftlock/shiftlock-proxy/bank"
	"github.com/shiftlock/shiftlock-proxy/internal/stats"
)

// seriesOrder is the order series appear in, left to right; others follow
// alphabetically.
var seriesOrder = []string{"redlock-rs", "redlock-1", "redlock-3", "redlock-5", "proxy", "proxy-3", "proxy-3-unrouted", "proxy-embedded",
	"base-embedded", "proxy-fenced", "native", "native-fenced", "none", "null", "null-3"}

// group is every run of one setup, mix and skew.
type group struct {
	setup           string // "" for the main grid
	mix, skew, desc string
	series          []string // in seriesOrder
	runs            map[string][]*bank.Result
}

// readResults loads every *.json result under dir.
func readResults(dir string) ([]*bank.Result, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no results (*.json) in %s", dir)
	}
	sort.Strings(files)
	var rs []*bank.Result
	for _, f := range files {
		r, err := bank.LoadResult(f)
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	return rs, nil
}

func seriesRank(s string) int {
	if i := slices.Index(seriesOrder, s); i >= 0 {
		return i
	}
	return len(seriesOrder)
}

func compareSeries(a, b string) int {
	return cmp.Or(cmp.Compare(seriesRank(a), seriesRank(b)), cmp.Compare(a, b))
}

// skewRank orders skews from least to most contended as the grid runs them.
func skewRank(s string) int {
	switch {
	case s == "uniform":
		return 0
	case len(s) >= 4 && s[:4] == "zipf":
		return 1
	}
	return 2
}

// title names g in headings.
func (g *group) title() string {
	t := fmt.Sprintf("%s mix, %s", g.mix, g.desc)
	if g.setup != "" {
		t = g.setup + " setup: " + t
	}
	return t
}

// groupResults groups results by setup, mix and skew, in a stable order:
// named setups first, then the classic mix, skews from least contended,
// series in seriesOrder.
func groupResults(rs []*bank.Result) []*group {
	byKey := map[[3]string]*group{}
	var gs []*group
	for _, r := range rs {
		k := [3]string{r.Setup, r.Mix, r.Skew}
		g := byKey[k]
		if g == nil {
			g = &group{setup: r.Setup, mix: r.Mix, skew: r.Skew, desc: r.SkewDesc, runs: map[string][]*bank.Result{}}
			byKey[k] = g
			gs = append(gs, g)
		}
		s := r.Series()
		if g.runs[s] == nil {
			g.series = append(g.series, s)
		}
		g.runs[s] = append(g.runs[s], r)
	}
	for _, g := range gs {
		slices.SortFunc(g.series, compareSeries)
		for _, rs := range g.runs {
			slices.SortFunc(rs, func(a, b *bank.Result) int { return cmp.Compare(a.Run, b.Run) })
		}
	}
	slices.SortFunc(gs, func(a, b *group) int {
		return cmp.Or(cmp.Compare(b.setup, a.setup), cmp.Compare(mixRank(a.mix), mixRank(b.mix)), cmp.Compare(skewRank(a.skew), skewRank(b.skew)), cmp.Compare(a.skew, b.skew))
	})
	return gs
}

func mixRank(m string) int {
	if m == "smallbank" {
		return 0
	}
	return 1
}

// medOK is the median over g's runs of series s of f, NaN (not measured)
// left out; ok is false if no run measured it.
func (g *group) medOK(s string, f func(*bank.Result) float64) (m float64, ok bool) {
	var xs []float64
	for _, r := range g.runs[s] {
		if x := f(r); !math.IsNaN(x) {
			xs = append(xs, x)
		}
	}
	return stats.Median(xs), len(xs) > 0
}

// med is medOK without ok: 0 if nothing was measured.
func (g *group) med(s string, f func(*bank.Result) float64) float64 {
	m, _ := g.medOK(s, f)
	return m
}

// ratios are f(a)/f(b) for every run number both series have: measured in
// the same round of the grid, so under the same machine state.
func (g *group) ratios(a, b string, f func(*bank.Result) float64) []float64 {
	var out []float64
	for _, ra := range g.runs[a] {
		for _, rb := range g.runs[b] {
			if x, y := f(ra), f(rb); ra.Run == rb.Run && y != 0 && !math.IsNaN(x) && !math.IsNaN(y) {
				out = append(out, x/y)
			}
		}
	}
	return out
}

// hist merges the latency distributions of every run of series s.
func (g *group) hist(s string) *bank.Hist {
	var h *bank.Hist
	for _, r := range g.runs[s] {
		if h == nil {
			h = r.Hist()
		} else {
			h.Merge(r.Hist())
		}
	}
	return h
}

func goodput(r *bank.Result) float64 { return r.Goodput }
func p50(r *bank.Result) float64     { return float64(r.All.P50) }
func p99(r *bank.Result) float64     { return float64(r.All.P99) }
func p999(r *bank.Result) float64    { return float64(r.All.P999) }

// roleCPU is a role's core-µs per committed transaction, NaN if the run
// measured no process of that role (old results, or none on the lock side).
func roleCPU(role string) func(*bank.Result) float64 {
	return func(r *bank.Result) float64 {
		if v, ok := r.CPUPerTxn[role]; ok {
			return v
		}
		return math.NaN()
	}
}

var lockCPU = roleCPU(bank.RoleLock)

// procCPU is one process's core-µs per committed transaction, NaN if the
// run did not measure it.
func procCPU(role, name string) func(*bank.Result) float64 {
	return func(r *bank.Result) float64 {
		for _, p := range r.CPU {
			if p.Role == role && p.Name == name {
				return p.PerTxn
			}
		}
		return math.NaN()
	}
}

// busy is the machine's busy cores over a run's window, NaN if unmeasured.
func busy(r *bank.Result) float64 {
	if len(r.CPU) == 0 {
		return math.NaN()
	}
	return r.MachineBusy
}

// lockProcs are the names of the lock processes series s measured, in the
// order its runs list them.
func (g *group) lockProcs(s string) []string {
	var names []string
	for _, r := range g.runs[s] {
		for _, p := range r.CPU {
			if p.Role == bank.RoleLock && !slices.Contains(names, p.Name) {
				names = append(names, p.Name)
			}
		}
	}
	return names
}

func mustMkdir(dir string) error { return os.MkdirAll(dir, 0o755) }
