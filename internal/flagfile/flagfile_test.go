package flagfile

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type conf struct {
	Listen  string `yaml:"listen"`
	Entries int    `yaml:"entries"`
}

func TestLoadKeepsDefaultsAndRefusesUnknownKeys(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("entries: 7\n"), 0o644)
	c := conf{Listen: "127.0.0.1:1", Entries: 1}
	if err := Load(good, &c); err != nil || c.Entries != 7 || c.Listen != "127.0.0.1:1" {
		t.Fatalf("Load = %+v, %v", c, err)
	}
	empty := filepath.Join(dir, "empty.yaml")
	os.WriteFile(empty, nil, 0o644)
	if err := Load(empty, &c); err != nil {
		t.Fatalf("an empty file is no error: %v", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("entires: 7\n"), 0o644)
	if err := Load(bad, &c); err == nil || !strings.Contains(err.Error(), "entires") {
		t.Fatalf("a misspelt key must be an error naming it: %v", err)
	}
	if err := Load(filepath.Join(dir, "missing.yaml"), &c); err == nil {
		t.Fatal("a missing file must be an error")
	}
}

func TestGivenListsOnlyFlagsOnTheCommandLine(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("a", "1", "")
	fs.String("b", "2", "")
	if err := fs.Parse([]string{"-b", "2"}); err != nil {
		t.Fatal(err)
	}
	if g := Given(fs); g["a"] || !g["b"] {
		t.Fatalf("Given = %v", g)
	}
}

// TestLayersDefaultsFileFlags: each layer overrides the one before, field by
// field; a flag not given never undoes the file, even at its default value,
// and a flag given at the default value still overrides the file.
func TestLayersDefaultsFileFlags(t *testing.T) {
	type cfg struct {
		Listen  string        `yaml:"listen"`
		Entries uint64        `yaml:"entries"`
		Loops   int           `yaml:"loops"`
		Quorum  bool          `yaml:"quorum"`
		Frac    float64       `yaml:"frac"`
		Wait    time.Duration `yaml:"wait"`
		Peers   []string      `yaml:"peers"`
		Rule    string        `yaml:"rule"`
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("entries: 7\nloops: 3\nquorum: true\npeers: [f1, f2]\nwait: 2s\n"), 0o644)
	parse := func(args ...string) (cfg, error) {
		c := cfg{Listen: "d:1", Entries: 1, Loops: 1, Frac: 0.5, Wait: time.Second, Peers: []string{"d"}}
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		l := New(fs, "config file")
		l.String(&c.Listen, "listen", c.Listen, "")
		l.Uint64(&c.Entries, "entries", c.Entries, "")
		l.Int(&c.Loops, "loops", c.Loops, "")
		l.Bool(&c.Quorum, "quorum", c.Quorum, "")
		l.Float64(&c.Frac, "frac", c.Frac, "")
		l.Duration(&c.Wait, "wait", c.Wait, "")
		l.List(&c.Peers, "peer", "")
		l.Func("rule", "", func(v string) { c.Rule = "rule:" + v })
		if err := fs.Parse(args); err != nil {
			return c, err
		}
		return c, l.Apply(&c)
	}
	c, err := parse()
	if err != nil || c.Listen != "d:1" || c.Entries != 1 || c.Quorum || len(c.Peers) != 1 || c.Rule != "" {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	c, err = parse("-config", file)
	if err != nil || c.Listen != "d:1" || c.Entries != 7 || c.Loops != 3 || !c.Quorum || c.Wait != 2*time.Second || strings.Join(c.Peers, ",") != "f1,f2" {
		t.Fatalf("file over defaults: %+v %v", c, err)
	}
	c, err = parse("-config", file, "-loops", "1", "-quorum=false", "-frac", "0.25", "-peer", "p1, p2", "-peer", "p3", "-rule", "auto", "-listen", "f:2")
	if err != nil || c.Entries != 7 || c.Loops != 1 || c.Quorum || c.Frac != 0.25 || c.Wait != 2*time.Second ||
		strings.Join(c.Peers, ",") != "p1,p2,p3" || c.Rule != "rule:auto" || c.Listen != "f:2" {
		t.Fatalf("flags over file: %+v %v", c, err)
	}
	if _, err := parse("-config", filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("a missing -config file must be an error")
	}
}
