// Command mdsection replaces one generated section of a Markdown file with
// standard input, for benchmark scripts:
//
//	go run ./internal/docsection/mdsection -file docs/benchmarks.md -section micro < table.md
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/shiftlock/shiftlock-proxy/internal/docsection"
)

func main() {
	file := flag.String("file", "docs/benchmarks.md", "Markdown file")
	section := flag.String("section", "", "section name (marker)")
	title := flag.String("title", "Benchmarks", "title if the file is created")
	flag.Parse()
	body, err := io.ReadAll(os.Stdin)
	if err == nil && *section == "" {
		err = fmt.Errorf("-section is required")
	}
	if err == nil {
		err = docsection.Replace(*file, *title, *section, string(body))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mdsection:", err)
		os.Exit(1)
	}
}
