package flagfile

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
