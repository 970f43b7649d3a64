// Package docsection rewrites one generated section of a Markdown file,
// between "<!-- BEGIN name -->" and "<!-- END name -->", leaving everything
// else alone, so several benchmark commands can share one page (docs/benchmarks/range.md
// holds two generated sections).
package docsection

import (
	"fmt"
	"os"
	"strings"
)

// Replace puts body between the markers of section name in the file at
// path, appending the section if the file lacks it and creating the file
// (with title) if it does not exist.
func Replace(path, title, name, body string) error {
	begin, end := "<!-- BEGIN "+name+" -->", "<!-- END "+name+" -->"
	raw, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		raw, err = []byte("# "+title+"\n"), nil
	}
	if err != nil {
		return err
	}
	text := string(raw)
	block := begin + "\n" + strings.TrimRight(body, "\n") + "\n" + end
	i, j := strings.Index(text, begin), strings.Index(text, end)
	switch {
	case i >= 0 && j > i:
		text = text[:i] + block + text[j+len(end):]
	case i >= 0 || j >= 0:
		return fmt.Errorf("%s: section %q has only one of its markers", path, name)
	default:
		text = strings.TrimRight(text, "\n") + "\n\n" + block + "\n"
	}
	return os.WriteFile(path, []byte(text), 0o644)
}
