package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/bank"
)

func loadCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bank load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	getCfg := configFlags(fs)
	batch := fs.Int("batch", 1000, "accounts per MSET")
	pipes := fs.Int("pipelines", 4, "MSETs in flight")
	quiet := fs.Bool("quiet", false, "no progress bar")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := getCfg()
	if err != nil {
		return err
	}
	if cfg.Accounts == 0 {
		cfg.Accounts = 1_000_000
	}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.Redis, PoolSize: *pipes + 2})
	defer rdb.Close()
	start := time.Now()
	bar := &progressBar{w: stderr, label: "loading"}
	lc := bank.LoadConfig{Accounts: cfg.Accounts, Seed: cfg.Seed, Batch: *batch, Pipelines: *pipes}
	// A bar redrawn with carriage returns is noise in a log file.
	if !*quiet && isTerminal(stderr) {
		lc.Progress = bar.update
	}
	total, err := bank.Load(ctx, rdb, lc)
	bar.finish()
	if err != nil {
		return err
	}
	el := time.Since(start)
	fmt.Fprintf(stdout, "loaded %d accounts into %s in %v (%.0f accounts/s); the bank holds %s\n",
		cfg.Accounts, cfg.Redis, el.Round(time.Millisecond), float64(cfg.Accounts)/el.Seconds(), bank.Cents(total))
	return nil
}

// progressBar draws a one-line bar on a terminal (or any writer).
type progressBar struct {
	w     io.Writer
	label string
	last  time.Time
	shown uint64
	drawn bool
}

func (p *progressBar) update(done, total uint64) {
	if done < p.shown || (done < total && time.Since(p.last) < 100*time.Millisecond) {
		return
	}
	p.shown, p.last, p.drawn = done, time.Now(), true
	const width = 40
	n := int(done * width / total)
	fmt.Fprintf(p.w, "\r%s [%s%s] %3d%% %d/%d", p.label, strings.Repeat("#", n), strings.Repeat(" ", width-n), done*100/total, done, total)
}

func (p *progressBar) finish() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
