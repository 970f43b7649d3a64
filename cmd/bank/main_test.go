package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

func bankCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := mainArgs(context.Background(), args, &out, &errb)
	if testing.Verbose() {
		t.Logf("bank %s -> %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
	}
	return out.String() + errb.String(), code
}

// TestLoadRunReport drives the command as make demo does, on a small bank:
// load, run a locking and a non-locking locker, report with figures into a
// copy of a benchmarks page that has another section to keep.
func TestLoadRunReport(t *testing.T) {
	redis := testproc.Redis(t)
	mn := testproc.Memnode(t)
	dir := t.TempDir()
	if out, code := bankCmd(t, "run", "-redis", redis.Addr, "-locker", "none"); code == 0 || !strings.Contains(out, "bank load") {
		t.Fatalf("run before load: exit %d, %q", code, out)
	}
	if out, code := bankCmd(t, "load", "-redis", redis.Addr, "-accounts", "2000", "-quiet"); code != 0 || !strings.Contains(out, "loaded 2000 accounts") {
		t.Fatalf("load: exit %d\n%s", code, out)
	}
	for i, l := range []string{"native", "none"} {
		out, code := bankCmd(t, "run", "-config", "../../configs/bank.yaml", "-redis", redis.Addr, "-locker", l, "-memnode", mn.Addr,
			"-skew", "hotspot:1:90", "-clients", "8", "-warmup", "200ms", "-duration", "1s", "-quiet", "-run", "1",
			"-out", filepath.Join(dir, l+".json"), "-csv", filepath.Join(dir, "runs.csv"))
		if code != 0 || !strings.Contains(out, "goodput") {
			t.Fatalf("run %s: exit %d\n%s", l, code, out)
		}
		if i == 0 && !strings.Contains(out, "audit OK") {
			t.Fatalf("native audit:\n%s", out)
		}
	}
	csv, err := os.ReadFile(filepath.Join(dir, "runs.csv"))
	if err != nil || strings.Count(string(csv), "\n") != 3 {
		t.Fatalf("CSV: %v\n%s", err, csv)
	}
	doc := filepath.Join(dir, "benchmarks.md")
	if err := os.WriteFile(doc, []byte("# Benchmarks\n\n<!-- BEGIN other -->\nkeep me\n<!-- END other -->\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "img")
	out, code := bankCmd(t, "report", "-in", dir, "-img", img, "-doc", doc, "-targets")
	if code != 0 || !strings.Contains(out, "native vs none") {
		t.Fatalf("report: exit %d\n%s", code, out)
	}
	md, _ := os.ReadFile(doc)
	for _, want := range []string{"keep me", "<!-- BEGIN smallbank -->", "## SmallBank", "| native |", "img/bank-hotspot-1-90.png", "### Targets"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("doc lacks %q:\n%s", want, md)
		}
	}
	if fi, err := os.Stat(filepath.Join(img, "bank-hotspot-1-90.png")); err != nil || fi.Size() < 1000 {
		t.Errorf("figure: %v", err)
	}
}
