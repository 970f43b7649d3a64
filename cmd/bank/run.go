package main

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/bank"
	"github.com/shiftlock/shiftlock-proxy/internal/keydist"
	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
)

// errAudit: the run finished but its audit failed (already reported).
var errAudit = errors.New("audit failed")

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bank run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	getCfg := configFlags(fs)
	out := fs.String("out", "", "write the result as JSON to this file (bankreport reads it)")
	csvPath := fs.String("csv", "", "append the result as a CSV row to this file")
	label := fs.String("label", "", "free-form label stored with the result")
	as := fs.String("as", "", "series name in the results instead of the locker's (e.g. proxy-embedded)")
	setup := fs.String("setup", "", "name of the grid this run belongs to (bankreport groups runs by it), e.g. paper")
	runIdx := fs.Int("run", 0, "run number stored with the result (report pairs runs by it for same-run ratios)")
	quiet := fs.Bool("quiet", false, "no progress lines")
	var cpu cpuFlag
	fs.Var(&cpu, "cpu", "measure a server's CPU over the window: role:name=PID, role data (the bank's redis-server) or lock (repeatable; the bank process is always measured)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := getCfg()
	if err != nil {
		return err
	}
	mix, err := bank.ParseMix(cfg.Mix)
	if err != nil {
		return err
	}
	writes, err := bank.ParseWriteMode(cfg.Writes)
	if err != nil {
		return err
	}
	pool := cfg.Clients + 8
	rdb := redis.NewClient(&redis.Options{Addr: cfg.Redis, PoolSize: pool})
	defer rdb.Close()
	loaded, err := bank.Loaded(ctx, rdb)
	if err != nil {
		return fmt.Errorf("reading %s on %s: %w", bank.MetaKey, cfg.Redis, err)
	}
	accounts := cfg.Accounts
	if accounts == 0 {
		accounts = loaded
	}
	if loaded == 0 || accounts == 0 || accounts > loaded {
		return fmt.Errorf("%s holds %d accounts; run `bank load -accounts N` first (asked for %d)", cfg.Redis, loaded, accounts)
	}
	dist, err := keydist.Parse(cfg.Skew, accounts)
	if err != nil {
		return err
	}
	locker, servers, err := bank.OpenLocker(ctx, bank.LockerConfig{Name: cfg.Locker, LockRedis: cfg.LockRedis,
		Proxies: cfg.Proxies, Memnodes: cfg.Memnodes, NativeWait: cfg.NativeWait, PoolSize: pool,
		TTL: cfg.LockTTL, Fence: cfg.Fence})
	if err != nil {
		return err
	}
	defer locker.Close()

	rc := bank.RunConfig{Data: rdb, Locker: locker, Servers: servers, Mix: mix, MixName: cfg.Mix, Dist: dist, Skew: cfg.Skew,
		Accounts: accounts, Clients: cfg.Clients, Warmup: cfg.Warmup, Duration: cfg.Duration, Writes: writes,
		Seed: cfg.Seed, Attempts: cfg.Attempts, CPU: cpu,
		Fence: cfg.Fence, BalanceLockFree: cfg.BalanceLockFree, Lookup: cfg.Lookup}
	if cfg.Lookup {
		if n, err := rdb.ZCard(ctx, bank.NamesKey).Uint64(); err != nil || n < accounts {
			return fmt.Errorf("-lookup needs the account names (%s) that bank load writes: %d of %d there (%v)", bank.NamesKey, n, accounts, err)
		}
	}
	name := cfg.Locker
	if servers > 1 {
		name = fmt.Sprintf("%s (%d servers)", cfg.Locker, servers)
	}
	fmt.Fprintf(stderr, "%s: %s mix, %s over %d accounts, %d clients, %v warm-up + %v\n",
		name, cfg.Mix, dist, accounts, cfg.Clients, cfg.Warmup, cfg.Duration)
	if !*quiet {
		rc.Progress = func(el time.Duration, n int64) {
			fmt.Fprintf(stderr, "  %3.0fs  %d committed\n", el.Seconds(), n)
		}
	}
	res, err := bank.Run(ctx, rc)
	if err != nil {
		return err
	}
	res.Label, res.Run, res.Name, res.Setup, res.TTL = *label, *runIdx, *as, *setup, cfg.LockTTL
	switch {
	case res.TTL == 0 && cfg.Locker == "redlock-rs":
		res.TTL = bank.RedlockRSDefaultTTL
	case cfg.Locker == "native":
		res.TTL = 0 // its locks have none: -lock-ttl does not apply
	}
	printResult(stdout, res)
	if *out != "" {
		if err := res.Save(*out); err != nil {
			return err
		}
	}
	if *csvPath != "" {
		if err := appendCSV(*csvPath, res); err != nil {
			return err
		}
	}
	if !res.Audit.OK && cfg.Locker != "none" {
		return errAudit
	}
	return nil
}

// cpuFlag is the repeatable -cpu role:name=PID.
type cpuFlag []bank.Process

func (f *cpuFlag) String() string {
	parts := make([]string, len(*f))
	for i, p := range *f {
		parts[i] = fmt.Sprintf("%s:%s=%d", p.Role, p.Name, p.PID)
	}
	return strings.Join(parts, " ")
}

func (f *cpuFlag) Set(v string) error {
	spec, pidText, ok := strings.Cut(v, "=")
	role, name, _ := strings.Cut(spec, ":")
	pid, err := strconv.Atoi(pidText)
	if !ok || err != nil || pid <= 0 || name == "" || (role != bank.RoleData && role != bank.RoleLock) {
		return fmt.Errorf("want data:NAME=PID or lock:NAME=PID, got %q", v)
	}
	// A wrong PID should fail the run now, not leave a hole in the report.
	if _, err := procutil.ProcCPU(pid); err != nil {
		return fmt.Errorf("%s: %w", v, err)
	}
	*f = append(*f, bank.Process{Role: role, Name: name, PID: pid})
	return nil
}

func appendCSV(path string, r *bank.Result) error {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if os.IsNotExist(statErr) {
		_ = w.Write(bank.CSVHeader)
	}
	_ = w.Write(r.CSVRow())
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cpuSummary is each role's CPU per transaction with its processes:
// "client 61.2 (bank), lock 45.0 (proxy 30.0 + memnode 15.0)".
func cpuSummary(r *bank.Result) string {
	var parts []string
	for _, role := range []string{bank.RoleClient, bank.RoleData, bank.RoleLock} {
		var procs []string
		for _, p := range r.CPU {
			if p.Role == role {
				procs = append(procs, fmt.Sprintf("%s %.1f", p.Name, p.PerTxn))
			}
		}
		if len(procs) > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f (%s)", role, r.CPUPerTxn[role], strings.Join(procs, " + ")))
		}
	}
	return strings.Join(parts, ", ")
}

func ms(us int64) string { return fmt.Sprintf("%.2f", float64(us)/1000) }

func printResult(w io.Writer, r *bank.Result) {
	fmt.Fprintf(w, "\n%s  %s  %s  %d clients  %v\n", r.Series(), r.Mix, r.SkewDesc, r.Clients, r.Duration)
	fmt.Fprintf(w, "goodput %.0f txn/s  (%d committed, %d declined by their own rules, %d lock aborts or timeouts, %d dropped, %d errors)\n",
		r.Goodput, r.All.Committed, r.All.Declined, r.All.Aborts, r.Dropped, r.All.Errors)
	fmt.Fprintf(w, "%-16s %10s %10s %10s %10s %8s\n", "latency (ms)", "committed", "p50", "p99", "p999", "aborts")
	for t := range bank.NumTxnTypes {
		s := r.Types[t.String()]
		if s == nil {
			continue
		}
		fmt.Fprintf(w, "%-16s %10d %10s %10s %10s %8d\n", t, s.Committed, ms(s.P50), ms(s.P99), ms(s.P999), s.Aborts)
	}
	fmt.Fprintf(w, "%-16s %10d %10s %10s %10s %8d\n", "all", r.All.Committed, ms(r.All.P50), ms(r.All.P99), ms(r.All.P999), r.All.Aborts)
	a := r.Audit
	if a.OK {
		fmt.Fprintf(w, "audit OK: %s = %s before %+.2f committed deltas; no negative savings\n",
			bank.Cents(a.After.Total), bank.Cents(a.Before.Total), float64(a.Deltas)/100)
	} else {
		verdict := "AUDIT FAILED"
		if r.Locker == "none" {
			verdict = "audit failed, as expected without locks"
		}
		fmt.Fprintf(w, "%s:\n", verdict)
		for _, p := range a.Problems {
			fmt.Fprintf(w, "  - %s\n", p)
		}
	}
	if r.Expired > 0 || r.Fenced > 0 || r.Fence {
		fmt.Fprintf(w, "safety: %d transactions found a lock gone at release (TTL %v ran out while held); %d attempts fenced out by the data store (fencing %s)\n",
			r.Expired, r.TTL, r.Fenced, map[bool]string{true: "on", false: "off"}[r.Fence])
	}
	if len(r.CPU) > 0 {
		fmt.Fprintf(w, "CPU per committed transaction (core-µs): %s; the machine kept %.2f cores busy\n", cpuSummary(r), r.MachineBusy)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
	var row strings.Builder
	cw := csv.NewWriter(&row)
	_ = cw.Write(r.CSVRow())
	cw.Flush()
	fmt.Fprintf(w, "csv: %s", row.String())
}
