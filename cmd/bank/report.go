package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/shiftlock/shiftlock-proxy/bank"
	"github.com/shiftlock/shiftlock-proxy/internal/docsection"
	"github.com/shiftlock/shiftlock-proxy/internal/stats"
)

// docSection is the marker of the SmallBank section of docs/benchmarks.md.
const docSection = "smallbank"

func reportCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bank report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "out/bank", "directory of run results (*.json, written by bank run -out)")
	img := fs.String("img", "", "directory for the PNG figures (none if empty)")
	prefix := fs.String("prefix", "bank-", "figure file name prefix")
	doc := fs.String("doc", "", `rewrite the "`+docSection+`" section of this Markdown file`)
	header := fs.String("header", "", "Markdown file placed under the section's title (setup, command, timing)")
	notes := fs.String("notes", "", "Markdown file placed after the tables (analysis)")
	targets := fs.Bool("targets", false, "judge the issue's targets")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rs, err := readResults(*in)
	if err != nil {
		return err
	}
	gs := groupResults(rs)
	var figs []string
	if *img != "" {
		if err := mustMkdir(*img); err != nil {
			return err
		}
		for _, g := range gs {
			path := figurePath(*img, *prefix, g)
			if err := drawGroup(g, path); err != nil {
				return fmt.Errorf("drawing %s: %w", path, err)
			}
			figs = append(figs, path)
		}
	}
	fmt.Fprint(stdout, sideBySide(gs))
	for _, f := range figs {
		fmt.Fprintln(stdout, "figure:", f)
	}
	if *doc == "" {
		return nil
	}
	var b strings.Builder
	b.WriteString("## SmallBank\n\n")
	for _, f := range []string{*header} {
		if f != "" {
			raw, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			b.WriteString(strings.TrimSpace(string(raw)) + "\n\n")
		}
	}
	imgLink := func(path string) string {
		rel, err := filepath.Rel(filepath.Dir(*doc), path)
		if err != nil {
			return path
		}
		return filepath.ToSlash(rel)
	}
	b.WriteString(markdown(gs, func(g *group) string {
		if *img == "" {
			return ""
		}
		return imgLink(figurePath(*img, *prefix, g))
	}))
	if *targets {
		b.WriteString(judge(gs))
	}
	if *notes != "" {
		raw, err := os.ReadFile(*notes)
		if err != nil {
			return err
		}
		b.WriteString("\n" + strings.TrimSpace(string(raw)) + "\n")
	}
	return docsection.Replace(*doc, "Benchmarks", docSection, b.String())
}

func msf(us float64) string {
	switch {
	case us >= 100_000:
		return fmt.Sprintf("%.0f", us/1000)
	case us >= 10_000:
		return fmt.Sprintf("%.1f", us/1000)
	}
	return fmt.Sprintf("%.2f", us/1000)
}

func ratioList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, ", ")
}

// auditCell says how the audits of a series went.
func auditCell(rs []*bank.Result) string {
	failed := 0
	var worst int64
	neg := 0
	for _, r := range rs {
		if !r.Audit.OK {
			failed++
		}
		if m := r.Audit.Mismatch; m < 0 && -m > worst {
			worst = -m
		} else if m > worst {
			worst = m
		}
		neg = max(neg, r.Audit.After.NegativeSavings)
	}
	if failed == 0 {
		return fmt.Sprintf("OK %d/%d", len(rs), len(rs))
	}
	s := fmt.Sprintf("**failed %d/%d**", failed, len(rs))
	if worst != 0 {
		s += fmt.Sprintf(" (up to %s off)", bank.Cents(worst))
	}
	if neg > 0 {
		s += fmt.Sprintf(" (%d negative savings)", neg)
	}
	return s
}

// sideBySide is the terminal table: one block per mix and skew.
func sideBySide(gs []*group) string {
	var b strings.Builder
	for _, g := range gs {
		fmt.Fprintf(&b, "\n%s mix, %s (medians of runs)\n", g.mix, g.desc)
		fmt.Fprintf(&b, "%-16s %5s %12s %10s %10s %10s %8s %8s  %s\n", "locker", "runs", "goodput/s", "p50 ms", "p99 ms", "p999 ms", "aborts", "dropped", "audit")
		for _, s := range g.series {
			rs := g.runs[s]
			fmt.Fprintf(&b, "%-16s %5d %12.0f %10s %10s %10s %8.0f %8.0f  %s\n", s, len(rs), g.med(s, goodput),
				msf(g.med(s, p50)), msf(g.med(s, p99)), msf(g.med(s, p999)),
				g.med(s, func(r *bank.Result) float64 { return float64(r.All.Aborts) }),
				g.med(s, func(r *bank.Result) float64 { return float64(r.Dropped) }),
				strings.ReplaceAll(auditCell(rs), "**", ""))
		}
		for _, pr := range comparisons(g) {
			gr := g.ratios(pr[0], pr[1], goodput)
			lr := g.ratios(pr[0], pr[1], p99)
			if len(gr) == 0 {
				continue
			}
			fmt.Fprintf(&b, "%s vs %s: goodput x%.2f, p99 x%.3f (same-run ratios, median of %d)\n", pr[0], pr[1], stats.Median(gr), stats.Median(lr), len(gr))
		}
	}
	return b.String()
}

// comparisons are the ratios worth printing for g, as [numerator, denominator].
func comparisons(g *group) [][2]string {
	var out [][2]string
	has := func(s string) bool { return len(g.runs[s]) > 0 }
	for _, base := range []string{"redlock-1", "redlock-3"} {
		for _, s := range []string{"proxy", "proxy-3", "proxy-embedded", "native"} {
			if has(s) && has(base) {
				out = append(out, [2]string{s, base})
			}
		}
	}
	if has("native") && has("none") {
		out = append(out, [2]string{"native", "none"})
	}
	if has("proxy") && has("none") {
		out = append(out, [2]string{"proxy", "none"})
	}
	// No locker can beat the bank without locks: this bounds every ratio
	// above.
	if has("none") && has("redlock-1") {
		out = append(out, [2]string{"none", "redlock-1"})
	}
	return out
}

// markdown renders every group: a table of medians, the same-run ratios,
// latency by transaction type, and the figure.
func markdown(gs []*group, fig func(*group) string) string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	for _, g := range gs {
		w("### %s mix, %s\n\n", g.mix, g.desc)
		w("| locker | runs | goodput (txn/s) | p50 (ms) | p99 (ms) | p999 (ms) | lock aborts | dropped | audit |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, s := range g.series {
			w("| %s | %d | %.0f | %s | %s | %s | %.0f | %.0f | %s |\n", s, len(g.runs[s]), g.med(s, goodput),
				msf(g.med(s, p50)), msf(g.med(s, p99)), msf(g.med(s, p999)),
				g.med(s, func(r *bank.Result) float64 { return float64(r.All.Aborts) }),
				g.med(s, func(r *bank.Result) float64 { return float64(r.Dropped) }), auditCell(g.runs[s]))
		}
		if cs := comparisons(g); len(cs) > 0 {
			w("\n| same-run ratio | goodput | p50 | p99 |\n|---|---|---|---|\n")
			for _, pr := range cs {
				gr, l50, l99 := g.ratios(pr[0], pr[1], goodput), g.ratios(pr[0], pr[1], p50), g.ratios(pr[0], pr[1], p99)
				if len(gr) == 0 {
					continue
				}
				w("| %s / %s | **%.2fx** (%s) | %.3fx | %.3fx (%s) |\n", pr[0], pr[1], stats.Median(gr), ratioList(gr), stats.Median(l50), stats.Median(l99), ratioList(l99))
			}
		}
		w("\np50 / p99 latency by transaction type (ms, medians of runs):\n\n| type |")
		for _, s := range g.series {
			w(" %s |", s)
		}
		w("\n|---|%s\n", strings.Repeat("---|", len(g.series)))
		for t := range bank.NumTxnTypes {
			name := t.String()
			if _, ok := g.runs[g.series[0]][0].Types[name]; !ok {
				continue
			}
			w("| %s |", name)
			for _, s := range g.series {
				typ := func(f func(*bank.Stats) int64) func(*bank.Result) float64 {
					return func(r *bank.Result) float64 {
						if st := r.Types[name]; st != nil {
							return float64(f(st))
						}
						return 0
					}
				}
				w(" %s / %s |", msf(g.med(s, typ(func(st *bank.Stats) int64 { return st.P50 }))), msf(g.med(s, typ(func(st *bank.Stats) int64 { return st.P99 }))))
			}
			w("\n")
		}
		if f := fig(g); f != "" {
			w("\n![SmallBank %s, %s: latency CDF and goodput](%s)\n", g.mix, g.desc, f)
		}
		w("\n")
	}
	return b.String()
}

// judge checks the targets on the classic mix.
func judge(gs []*group) string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	w("### Targets\n\nMedians of same-run ratios, classic mix.\n\n| skew | target | measured | verdict |\n|---|---|---|---|\n")
	for _, g := range gs {
		if g.mix != "smallbank" {
			continue
		}
		row := func(target string, xs []float64, ok func(float64) bool, unit string) {
			if len(xs) == 0 {
				w("| %s | %s | not measured | - |\n", g.desc, target)
				return
			}
			m := stats.Median(xs)
			w("| %s | %s | %.3g%s | %s |\n", g.desc, target, m, unit, verdict(ok(m)))
		}
		for _, s := range []string{"proxy", "proxy-embedded"} {
			if s != "proxy" && len(g.runs[s]) == 0 {
				continue
			}
			ref := ""
			if s != "proxy" {
				ref = " (for reference)"
			}
			if g.skew == "uniform" {
				row(s+" goodput >= 1.0x redlock-1"+ref, g.ratios(s, "redlock-1", goodput), func(x float64) bool { return x >= 1 }, "x")
				row(s+" goodput >= 2x redlock-3"+ref, g.ratios(s, "redlock-3", goodput), func(x float64) bool { return x >= 2 }, "x")
				continue
			}
			row(s+" goodput >= 10x redlock-1"+ref, g.ratios(s, "redlock-1", goodput), func(x float64) bool { return x >= 10 }, "x")
			row(s+" p99 <= 5% of redlock-1's"+ref, g.ratios(s, "redlock-1", p99), func(x float64) bool { return x <= 0.05 }, "x")
		}
		if g.skew == "uniform" {
			row("native goodput >= 60% of none", g.ratios("native", "none", goodput), func(x float64) bool { return x >= 0.6 }, "x")
		} else if len(g.runs["none"]) > 0 {
			w("| %s | bound: none / redlock-1 (no locker can do better) | %.3gx | - |\n", g.desc, stats.Median(g.ratios("none", "redlock-1", goodput)))
		}
	}
	w("\n")
	return b.String()
}
