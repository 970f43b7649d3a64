package docsection

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReplace(t *testing.T) {
	p := filepath.Join(t.TempDir(), "b.md")
	if err := Replace(p, "Benchmarks", "a", "one"); err != nil {
		t.Fatal(err)
	}
	if err := Replace(p, "Benchmarks", "b", "two"); err != nil {
		t.Fatal(err)
	}
	if err := Replace(p, "Benchmarks", "a", "uno\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	want := "# Benchmarks\n\n<!-- BEGIN a -->\nuno\n<!-- END a -->\n\n<!-- BEGIN b -->\ntwo\n<!-- END b -->\n"
	if string(got) != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
