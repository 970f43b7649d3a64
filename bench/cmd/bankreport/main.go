// Command bankreport turns the JSON results of `bank run -out` into the
// SmallBank tables and figures: a side-by-side summary on stdout, one PNG per
// setup and skew (latency CDF and goodput bars), and, with -doc, the
// "smallbank" section of a Markdown page.
//
//	bankreport -in out/bank -img docs/img -doc docs/benchmarks/smallbank.md
//
// It is the evaluation half of what was `bank report`: the bank command a
// user runs stays in the product (cmd/bank), the plotting and the targets
// live here, with the dependencies only they need.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() { os.Exit(mainArgs(os.Args[1:], os.Stdout, os.Stderr)) }

func mainArgs(args []string, stdout, stderr io.Writer) int {
	err := reportCmd(args, stdout, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintln(stderr, "bankreport:", err)
		return 1
	}
	return 0
}
