package itest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// TestDashboardMetricsExist: every series the shipped Grafana dashboard and
// Prometheus alert rules query exists in the /metrics of a live proxy
// joined to a live memory node, so that a renamed metric cannot leave a
// panel empty or an alert silent.
func TestDashboardMetricsExist(t *testing.T) {
	root, err := testproc.Root()
	if err != nil {
		t.Fatal(err)
	}
	exprs := dashboardExprs(t, filepath.Join(root, "configs/grafana/shiftlock-proxy.json"))
	exprs = append(exprs, ruleExprs(t, filepath.Join(root, "configs/prometheus/shiftlock-alerts.yml"))...)
	if len(exprs) < 10 {
		t.Fatalf("only %d queries found in the dashboard and the rules", len(exprs))
	}

	mnMetrics := fmt.Sprintf("127.0.0.1:%d", testproc.FreePort(t))
	mn := testproc.Memnode(t, "-entries", "4096", "-metrics", mnMetrics)
	p := testproc.Proxy(t, "-memnode", mn.Addr, "-metrics", "127.0.0.1:0", "-acquire-wait", "5s")
	maddr := metricsAddr(t, p)
	// Some traffic, so that label-keyed series (commands) exist.
	c := client(t, p.Addr)
	ctx := ctxT(t, 30*time.Second)
	release := redis.NewScript(casDelete)
	if ok, err := c.SetNX(ctx, "dash", "a", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("SetNX: %v %v", ok, err)
	}
	if n, err := release.Run(ctx, c, []string{"dash"}, "a").Int(); n != 1 || err != nil {
		t.Fatalf("release: %d %v", n, err)
	}

	have := map[string]bool{}
	for _, addr := range []string{maddr, mnMetrics} {
		for name := range scrapeNames(t, "http://"+addr+"/metrics") {
			have[name] = true
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

func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
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

func ruleExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" || rule.Expr == "" {
				t.Fatalf("%s: a rule without alert name or expr: %+v", path, rule)
			}
			out = append(out, rule.Expr)
		}
	}
	return out
}

// scrapeNames is the metric names a /metrics page declares.
func scrapeNames(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	names := map[string]bool{}
	for _, l := range strings.Split(string(body), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
		}
	}
	return names
}
