package itest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestDashboardMetricsExist: every series the shipped Grafana dashboard and
// Prometheus alert rules query exists in the /metrics of a live proxy
// joined to a live memory node, so that a renamed metric cannot leave a
// panel empty or an alert silent.
func TestDashboardMetricsExist(t *testing.T) {
	exprs := dashboardExprs(t, "configs/grafana/shiftlock-proxy.json")
	exprs = append(exprs, ruleExprs(t, "configs/prometheus/shiftlock-alerts.yml")...)
	if len(exprs) < 10 {
		t.Fatalf("only %d queries found in the dashboard and the rules", len(exprs))
	}

	mn := testproc.Memnode(t, "-entries", "4096", "-metrics", "127.0.0.1:0")
	p := testproc.Proxy(t, "-memnode", mn.Addr, "-metrics", "127.0.0.1:0", "-acquire-wait", "5s")
	// Some traffic, so that label-keyed series (commands) exist.
	if err := lockCycle(ctxT(t, 30*time.Second), client(t, p.Addr), "dash", "a", time.Minute); err != nil {
		t.Fatal(err)
	}

	// The metric names the /metrics pages declare.
	have := map[string]bool{}
	for _, addr := range []string{metricsAddr(t, p), metricsAddr(t, mn)} {
		for _, l := range scrapeMetrics(t, addr) {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
				have[f[2]] = true
			}
		}
	}
	ident := regexp.MustCompile(`\b(?:proxy|memnode|rdma)_[a-z0-9_]+\b`)
	var missing []string
	checked := map[string]bool{}
	for _, e := range exprs {
		for _, name := range ident.FindAllString(e, -1) {
			base := name
			for _, suf := range []string{"_bucket", "_count", "_sum"} {
				if strings.HasSuffix(name, suf) && have[strings.TrimSuffix(name, suf)] {
					base = strings.TrimSuffix(name, suf)
				}
			}
			checked[base] = true
			if !have[base] {
				missing = append(missing, fmt.Sprintf("%s (in %s)", name, e))
			}
		}
	}
	if len(missing) > 0 {
		t.Fatalf("series queried by the dashboard or the rules but absent from /metrics:\n%s", strings.Join(missing, "\n"))
	}
	names := make([]string, 0, len(checked))
	for n := range checked {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("%d queries use %d metrics, all exported: %s", len(exprs), len(names), strings.Join(names, " "))
}

// dashboardExprs are the queries of the Grafana dashboard at path rel in
// the module.
func dashboardExprs(t *testing.T, rel string) []string {
	t.Helper()
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(repoFile(t, rel), &d); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	var out []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Fatalf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	return out
}

// ruleExprs are the queries of the Prometheus alert rules at path rel in
// the module.
func ruleExprs(t *testing.T, rel string) []string {
	t.Helper()
	var r struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(repoFile(t, rel), &r); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	var out []string
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" || rule.Expr == "" {
				t.Fatalf("%s: a rule without alert name or expr: %+v", rel, rule)
			}
			out = append(out, rule.Expr)
		}
	}
	return out
}
