package main

import (
	"flag"
	"fmt"
	"io"
	"math"
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
	fs := flag.NewFlagSet("bankreport", flag.ContinueOnError)
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
	var overdrawn int64
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
		overdrawn = max(overdrawn, r.Audit.Overdrawn)
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
	if overdrawn > 0 {
		s += fmt.Sprintf(" (%d overdrafts seen)", overdrawn)
	}
	return s
}

// sideBySide is the terminal table: one block per mix and skew.
func sideBySide(gs []*group) string {
	var b strings.Builder
	for _, g := range gs {
		fmt.Fprintf(&b, "\n%s (medians of runs)\n", g.title())
		fmt.Fprintf(&b, "%-16s %5s %12s %10s %10s %10s %8s %8s  %s\n", "locker", "runs", "goodput/s", "p50 ms", "p99 ms", "p999 ms", "aborts", "dropped", "audit")
		for _, s := range g.series {
			rs := g.runs[s]
			fmt.Fprintf(&b, "%-16s %5d %12.0f %10s %10s %10s %8.0f %8.0f  %s\n", s, len(rs), g.med(s, goodput),
				msf(g.med(s, p50)), msf(g.med(s, p99)), msf(g.med(s, p999)),
				g.med(s, func(r *bank.Result) float64 { return float64(r.All.Aborts) }),
				g.med(s, func(r *bank.Result) float64 { return float64(r.Dropped) }),
				strings.ReplaceAll(auditCell(rs), "**", ""))
		}
		for _, s := range g.series {
			if c := cpuLine(g, s); c != "" {
				fmt.Fprintf(&b, "%-16s CPU per committed txn (core-µs): %s\n", s, c)
			}
		}
		for _, s := range g.series {
			ex := g.med(s, func(r *bank.Result) float64 { return float64(r.Expired) })
			fe := g.med(s, func(r *bank.Result) float64 { return float64(r.Fenced) })
			if ex > 0 || fe > 0 {
				fmt.Fprintf(&b, "%-16s safety: %.0f transactions found a lock gone at release, %.0f attempts fenced out by the data store\n", s, ex, fe)
			}
		}
		for _, pr := range comparisons(g) {
			gr := g.ratios(pr[0], pr[1], goodput)
			lr := g.ratios(pr[0], pr[1], p99)
			if len(gr) == 0 {
				continue
			}
			if g.setup == "paper" && pr == [2]string{"native", "redlock-rs"} {
				l50 := g.ratios(pr[0], pr[1], p50)
				fmt.Fprintf(&b, "paper's Fig. 11, ShiftLock vs RedLock: goodput x%.2f, p50 %+.1f%%, p99 %+.1f%%; measured here: x%.2f, p50 %+.1f%%, p99 %+.1f%%\n",
					paperGoodputRatio, 100*paperP50Change, 100*paperP99Change,
					stats.Median(gr), 100*(stats.Median(l50)-1), 100*(stats.Median(lr)-1))
			}
			fmt.Fprintf(&b, "%s vs %s: goodput x%.2f, p99 x%.3f", pr[0], pr[1], stats.Median(gr), stats.Median(lr))
			if cr := g.ratios(pr[0], pr[1], lockCPU); len(cr) > 0 {
				fmt.Fprintf(&b, ", lock-side CPU per txn x%.2f", stats.Median(cr))
			}
			fmt.Fprintf(&b, " (same-run ratios, median of %d)\n", len(gr))
		}
	}
	return b.String()
}

// cpuLine is series s's CPU per committed transaction by role, medians of
// runs, with the lock side's processes: "lock 45.0 (proxy 30.0 + memnode
// 15.0), data 20.1, client 60.2"; empty if nothing was measured.
func cpuLine(g *group, s string) string {
	var parts []string
	if v, ok := g.medOK(s, lockCPU); ok {
		parts = append(parts, fmt.Sprintf("lock %.1f (%s)", v, lockBreakdown(g, s)))
	}
	for _, role := range []string{bank.RoleData, bank.RoleClient} {
		if v, ok := g.medOK(s, roleCPU(role)); ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", role, v))
		}
	}
	return strings.Join(parts, ", ")
}

// lockBreakdown is the median CPU per committed transaction of each lock
// process of series s: "proxy 30.0 + memnode 15.0".
func lockBreakdown(g *group, s string) string {
	var parts []string
	for _, name := range g.lockProcs(s) {
		parts = append(parts, fmt.Sprintf("%s %.1f", name, g.med(s, procCPU(bank.RoleLock, name))))
	}
	return strings.Join(parts, " + ")
}

// hasCPU says whether any run of g measured CPU.
func hasCPU(g *group) bool {
	for _, rs := range g.runs {
		for _, r := range rs {
			if len(r.CPU) > 0 {
				return true
			}
		}
	}
	return false
}

// cpuCell is a median for a table cell, "-" if nothing was measured.
func cpuCell(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

// ceiling is the goodput at which run r's processes would keep all of the
// machine's cores busy: cores / CPU per transaction, the lock side's
// processes counted only if withLock. NaN if unmeasured.
func ceiling(withLock bool) func(*bank.Result) float64 {
	return func(r *bank.Result) float64 {
		if r.Cores == 0 || len(r.CPU) == 0 {
			return math.NaN()
		}
		var us float64
		for _, p := range r.CPU {
			if p.Role != bank.RoleLock || withLock {
				us += p.PerTxn
			}
		}
		if us <= 0 {
			return math.NaN()
		}
		return float64(r.Cores) * 1e6 / us
	}
}

func ceilingCell(g *group, s string, withLock bool) string {
	v, ok := g.medOK(s, ceiling(withLock))
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}

// safetyTable is the audit's side of the story for a group whose runs had
// lock TTLs, fencing, or expiries: what ran out, what the fences stopped,
// and what the books say.
func safetyTable(g *group) string {
	show := false
	for _, rs := range g.runs {
		for _, r := range rs {
			show = show || r.Fence || r.Expired > 0 || r.TTL > 0 || r.Fenced > 0
		}
	}
	if !show {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nSafety (medians of runs): *expiries* are transactions that found a lock gone at release, its TTL run out while the ")
	b.WriteString("transaction worked; *fenced out* are attempts the data redis-server refused because a newer holder of the lock had ")
	b.WriteString("touched the account (the attempt wrote nothing and was retried); *money off* is the audit's difference between the ")
	b.WriteString("money in the bank and what the committed transactions account for, worst run.\n\n")
	b.WriteString("| locker | lock TTL | fencing | expiries | fenced out | money off | audit |\n|---|---|---|---|---|---|---|\n")
	for _, s := range g.series {
		rs := g.runs[s]
		ttl, fence := "-", "off"
		var worst int64
		for _, r := range rs {
			if r.TTL > 0 {
				ttl = r.TTL.String()
			}
			if r.Fence {
				fence = "on"
			}
			worst = max(worst, abs64(r.Audit.Mismatch))
		}
		if ttl == "-" && (strings.HasPrefix(s, "redlock") || strings.HasPrefix(s, "proxy")) && s != "proxy-fenced" {
			ttl = "8s (redsync)"
		}
		off := "none"
		if worst != 0 {
			off = "**" + bank.Cents(worst) + "**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.0f | %s | %s |\n", s, ttl, fence,
			g.med(s, func(r *bank.Result) float64 { return float64(r.Expired) }),
			g.med(s, func(r *bank.Result) float64 { return float64(r.Fenced) }), off, auditCell(rs))
	}
	return b.String()
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// The paper's Fig. 11 (SmallBank on Redis): ShiftLock 36.55 Kops/s against
// RedLock's 5.56, the median latency 62.9% and the p99 95.2% lower.
const (
	paperGoodputRatio = 36.55 / 5.56
	paperP50Change    = -0.629
	paperP99Change    = -0.952
)

// paperTable holds series a against redlock-rs up to the paper's Fig. 11.
func paperTable(g *group, a string) string {
	gr := g.ratios(a, "redlock-rs", goodput)
	if len(gr) == 0 {
		return ""
	}
	l50, l99 := g.ratios(a, "redlock-rs", p50), g.ratios(a, "redlock-rs", p99)
	change := func(xs []float64) []float64 {
		out := make([]float64, len(xs))
		for i, x := range xs {
			out[i] = x - 1
		}
		return out
	}
	pct := func(xs []float64) string {
		parts := make([]string, len(xs))
		for i, x := range xs {
			parts[i] = fmt.Sprintf("%+.1f%%", 100*x)
		}
		return strings.Join(parts, ", ")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s against redlock-rs beside the paper's Fig. 11 (ShiftLock 36.55 against RedLock 5.56 Kops/s); ", a)
	b.WriteString("same-round values in parentheses:\n\n| | paper | measured | verdict |\n|---|---|---|---|\n")
	m := stats.Median(gr)
	verdict := "met"
	if m < 6.6 {
		verdict = "**missed** (target 6.6x)"
	}
	fmt.Fprintf(&b, "| goodput | %.2fx | %.2fx (%s) | %s |\n", paperGoodputRatio, m, ratioList(gr), verdict)
	fmt.Fprintf(&b, "| p50 latency | %+.1f%% | %+.1f%% (%s) | - |\n", 100*paperP50Change, 100*stats.Median(change(l50)), pct(change(l50)))
	fmt.Fprintf(&b, "| p99 latency | %+.1f%% | %+.1f%% (%s) | - |\n", 100*paperP99Change, 100*stats.Median(change(l99)), pct(change(l99)))
	return b.String()
}

// comparisons are the ratios worth printing for g, as [numerator, denominator].
func comparisons(g *group) [][2]string {
	var out [][2]string
	has := func(s string) bool { return len(g.runs[s]) > 0 }
	if has("redlock-rs") {
		for _, s := range []string{"native", "native-fenced", "proxy", "proxy-embedded", "proxy-fenced", "redlock-1", "none"} {
			if has(s) {
				out = append(out, [2]string{s, "redlock-rs"})
			}
		}
	}
	for _, base := range []string{"redlock-1", "redlock-3"} {
		for _, s := range []string{"proxy", "proxy-3", "proxy-3-unrouted", "proxy-embedded", "base-embedded", "native"} {
			if has(s) && has(base) {
				out = append(out, [2]string{s, base})
			}
		}
	}
	// An A/B (bench-bank.sh's BASE_PROXY): this build against another.
	if has("proxy-embedded") && has("base-embedded") {
		out = append(out, [2]string{"proxy-embedded", "base-embedded"})
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
	// Nor can a lock server on the proxy's front end beat one that locks
	// nothing; the proxy's distance from it is what its lock work costs.
	for _, c := range [][2]string{{"null", "redlock-1"}, {"null-3", "redlock-1"}, {"proxy", "null"}, {"proxy-embedded", "null"}, {"proxy-3", "null-3"}} {
		if has(c[0]) && has(c[1]) {
			out = append(out, c)
		}
	}
	return out
}

// markdown renders every group: a table of medians, the same-run ratios,
// latency by transaction type, and the figure.
func markdown(gs []*group, fig func(*group) string) string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	for _, g := range gs {
		w("### %s\n\n", g.title())
		w("| locker | runs | goodput (txn/s) | p50 (ms) | p99 (ms) | p999 (ms) | lock aborts | dropped | audit |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, s := range g.series {
			w("| %s | %d | %.0f | %s | %s | %s | %.0f | %.0f | %s |\n", s, len(g.runs[s]), g.med(s, goodput),
				msf(g.med(s, p50)), msf(g.med(s, p99)), msf(g.med(s, p999)),
				g.med(s, func(r *bank.Result) float64 { return float64(r.All.Aborts) }),
				g.med(s, func(r *bank.Result) float64 { return float64(r.Dropped) }), auditCell(g.runs[s]))
		}
		if hasCPU(g) {
			w("\nCPU per committed transaction (core-µs, medians of runs). Lock side: every lock server process of the series; ")
			w("client: the bank process, which also runs the lock client (redsync, or the native ShiftLock client).\n\n")
			w("The ceilings divide the machine's cores by CPU per transaction: *all processes* is the goodput at which this ")
			w("series would fill the machine; *free lock server* leaves the lock side out, the goodput the bank and its data ")
			w("redis-server allow this client code with a lock server that cost nothing (for redlock-1, the redsync ceiling).\n\n")
			w("| locker | lock side | lock processes | data redis-server | client (bank) | machine busy (cores) | ceiling, all processes (txn/s) | ceiling, free lock server (txn/s) |\n|---|---|---|---|---|---|---|---|\n")
			for _, s := range g.series {
				lv, lok := g.medOK(s, lockCPU)
				procs := "-"
				if lok {
					procs = lockBreakdown(g, s)
				}
				dv, dok := g.medOK(s, roleCPU(bank.RoleData))
				cv, cok := g.medOK(s, roleCPU(bank.RoleClient))
				bv, bok := g.medOK(s, busy)
				busyCell := "-"
				if bok {
					busyCell = fmt.Sprintf("%.2f", bv)
				}
				w("| %s | %s | %s | %s | %s | %s | %s | %s |\n", s, cpuCell(lv, lok), procs, cpuCell(dv, dok), cpuCell(cv, cok), busyCell,
					ceilingCell(g, s, true), ceilingCell(g, s, false))
			}
		}
		if cs := comparisons(g); len(cs) > 0 {
			w("\n| same-run ratio | goodput | p50 | p99 | lock-side CPU per txn |\n|---|---|---|---|---|\n")
			for _, pr := range cs {
				gr, l50, l99 := g.ratios(pr[0], pr[1], goodput), g.ratios(pr[0], pr[1], p50), g.ratios(pr[0], pr[1], p99)
				if len(gr) == 0 {
					continue
				}
				cpu := "-"
				if cr := g.ratios(pr[0], pr[1], lockCPU); len(cr) > 0 {
					cpu = fmt.Sprintf("%.2fx (%s)", stats.Median(cr), ratioList(cr))
				}
				w("| %s / %s | **%.2fx** (%s) | %.3fx | %.3fx (%s) | %s |\n", pr[0], pr[1], stats.Median(gr), ratioList(gr), stats.Median(l50), stats.Median(l99), ratioList(l99), cpu)
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
		w("%s", safetyTable(g))
		if g.setup == "paper" {
			w("%s", paperTable(g, "native"))
		}
		if f := fig(g); f != "" {
			w("\n![SmallBank %s: latency CDF and goodput](%s)\n", g.title(), f)
		}
		w("\n")
	}
	return b.String()
}

// judge checks issue 11's targets on the classic mix.
func judge(gs []*group) string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	w("### Targets (issue 11)\n\nMedians of same-run ratios (per round in parentheses), classic mix. Lock-side CPU is core-µs per committed transaction ")
	w("of every lock server process: the proxy and the memory node for proxy, the one process for proxy-embedded, the redis-server for redlock-1.\n\n")
	w("| skew | target | measured | verdict |\n|---|---|---|---|\n")
	for _, g := range gs {
		if g.mix != "smallbank" || g.setup != "" {
			continue
		}
		row := func(target, a string, f func(*bank.Result) float64, ok func(float64) bool) {
			xs := g.ratios(a, "redlock-1", f)
			if len(xs) == 0 {
				w("| %s | %s | not measured | - |\n", g.desc, target)
				return
			}
			m := stats.Median(xs)
			w("| %s | %s | %.3gx (%s) | %s |\n", g.desc, target, m, ratioList(xs), verdict(ok(m)))
		}
		atMost := func(c float64) func(float64) bool { return func(x float64) bool { return x <= c } }
		atLeast := func(c float64) func(float64) bool { return func(x float64) bool { return x >= c } }
		row("proxy lock-side CPU per txn (proxy + memnode) <= redlock-1's", "proxy", lockCPU, atMost(1))
		row("proxy-embedded lock-side CPU per txn <= redlock-1's", "proxy-embedded", lockCPU, atMost(1))
		switch {
		case g.skew == "uniform":
			row("proxy goodput >= 1.0x redlock-1", "proxy", goodput, atLeast(1))
			row("proxy-embedded goodput >= 1.2x redlock-1", "proxy-embedded", goodput, atLeast(1.2))
			row("proxy-3 goodput >= 1.0x redlock-1", "proxy-3", goodput, atLeast(1))
			row("proxy-3-unrouted goodput >= 1.0x redlock-1 (without quorum routing)", "proxy-3-unrouted", goodput, atLeast(1))
		case g.skew == "zipf:0.99":
			row("proxy goodput >= 2x redlock-1", "proxy", goodput, atLeast(2))
			row("proxy p99 <= 10% of redlock-1's", "proxy", p99, atMost(0.1))
			row("proxy-3 p99 <= redlock-1's", "proxy-3", p99, atMost(1))
			row("proxy-3-unrouted p99 <= redlock-1's (without quorum routing)", "proxy-3-unrouted", p99, atMost(1))
		case strings.HasPrefix(g.skew, "hotspot"):
			row("proxy goodput >= 2.5x redlock-1", "proxy", goodput, atLeast(2.5))
		}
		bound := func(what, a string, f func(*bank.Result) float64) {
			if xs := g.ratios(a, "redlock-1", f); len(xs) > 0 {
				w("| %s | bound: %s | %.3gx (%s) | - |\n", g.desc, what, stats.Median(xs), ratioList(xs))
			}
		}
		bound("none / redlock-1 goodput (no locker can do better)", "none", goodput)
		bound("null / redlock-1 goodput (no lock server on the proxy's front end can do better)", "null", goodput)
		bound("null / redlock-1 lock-side CPU per txn (the proxy's front end with no lock work)", "null", lockCPU)
		bound("null-3 / redlock-1 goodput (no three lock servers on the proxy's front end can do better)", "null-3", goodput)
	}
	w("\n")
	return b.String()
}
