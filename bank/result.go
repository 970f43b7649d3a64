package bank

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Latencies are recorded in microseconds, from 1 µs to 10 minutes, to 2
// significant digits (1%): enough for a CDF, small enough to keep per run.
func newHist() *Hist { return NewHist(1, 600_000_000, 2) }

// Stats summarise one transaction type (or all of them) over the measured
// window. Latency runs from a transaction's first attempt to its commit, so
// aborted attempts that were retried count in it.
type Stats struct {
	Committed int64 `json:"committed"`
	// Declined transactions are among the committed: their own rule said no.
	Declined int64 `json:"declined"`
	// Aborts are attempts that could not get their locks; Errors, attempts
	// that failed otherwise.
	Aborts int64 `json:"aborts"`
	Errors int64 `json:"errors"`
	// Latency percentiles in microseconds.
	P50  int64 `json:"p50_us"`
	P99  int64 `json:"p99_us"`
	P999 int64 `json:"p999_us"`
	Max  int64 `json:"max_us"`
	// Hist is the whole latency distribution (kept for all types only).
	Hist *HistSnapshot `json:"hist,omitempty"`
}

func (s *Stats) fill(h *Hist) {
	v := h.ValueAtPercentiles([]float64{50, 99, 99.9})
	s.P50, s.P99, s.P999, s.Max = v[50], v[99], v[99.9], h.Max()
}

// Result is one run.
type Result struct {
	Label   string    `json:"label,omitempty"`
	Run     int       `json:"run"`
	Started time.Time `json:"started"`
	Locker  string    `json:"locker"`
	Servers int       `json:"servers"` // lock servers (redis-servers, proxies, memory nodes)
	// Name, if set, names the series instead of the locker (e.g. the same
	// proxy locker against a differently deployed proxy).
	Name     string        `json:"name,omitempty"`
	Mix      string        `json:"mix"`
	Skew     string        `json:"skew"` // as given: uniform, zipf:0.99, hotspot:0.01:90
	SkewDesc string        `json:"skew_desc"`
	Accounts uint64        `json:"accounts"`
	Clients  int           `json:"clients"`
	Writes   string        `json:"writes"`
	Warmup   time.Duration `json:"warmup_ns"`
	Duration time.Duration `json:"duration_ns"`
	// Setup names a grid the run belongs to (e.g. "paper"); the report
	// groups runs by it. TTL is the lock TTL, when the locker has one
	// set on the command line.
	Setup                          string        `json:"setup,omitempty"`
	TTL                            time.Duration `json:"ttl_ns,omitempty"`
	Fence, BalanceLockFree, Lookup bool          `json:",omitempty"`

	// Goodput is committed transactions per second of the measured window.
	Goodput float64 `json:"goodput"`
	// Dropped transactions gave up after their last attempt.
	Dropped int64 `json:"dropped"`
	// Expired counts transactions that found a lock no longer held at
	// release (one or more of theirs): its TTL
	// ran out while the transaction worked. Fenced counts attempts the data
	// store refused because a newer lock holder had touched an account.
	Expired int64              `json:"expired"`
	Fenced  int64              `json:"fenced"`
	All     Stats              `json:"all"`
	Types   map[string]*Stats  `json:"types"`
	Audit   Audit              `json:"audit"`
	Errors  []string           `json:"errors,omitempty"` // the first few distinct ones
	Extra   map[string]float64 `json:"extra,omitempty"`

	// CPU is what each measured process spent over the measured window,
	// the bank itself (RoleClient) first; empty if nothing was measured.
	CPU []ProcessCPU `json:"cpu,omitempty"`
	// CPUPerTxn is core-µs per committed transaction, summed by role.
	CPUPerTxn map[string]float64 `json:"cpu_us_per_txn,omitempty"`
	// MachineBusy is how many cores the whole machine kept busy on
	// average over the window, other users' processes included.
	MachineBusy float64 `json:"machine_busy_cores,omitempty"`
	// Cores is the machine's CPU count (for CPU-bound ceilings).
	Cores int `json:"cores,omitempty"`
}

// Series is the locker with its number of lock servers where that varies
// ("redlock-3").
func (r *Result) Series() string {
	if r.Name != "" {
		return r.Name
	}
	if r.Locker == "redlock" || (r.Locker == "proxy" && r.Servers > 1) {
		return r.Locker + "-" + strconv.Itoa(r.Servers)
	}
	return r.Locker
}

// Save writes r as JSON.
func (r *Result) Save(path string) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// LoadResult reads a result written by Save.
func LoadResult(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := &Result{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// Hist returns the latency distribution of all types.
func (r *Result) Hist() *Hist {
	if r.All.Hist == nil {
		return newHist()
	}
	return ImportHist(r.All.Hist)
}

// CSVHeader and CSVRow give one line per run.
var CSVHeader = []string{"started", "label", "run", "series", "locker", "servers", "mix", "skew", "accounts", "clients", "writes",
	"duration_s", "goodput", "committed", "declined", "aborts", "errors", "dropped", "p50_us", "p99_us", "p999_us",
	"audit_ok", "mismatch_cents", "negative_savings",
	"cpu_client_us_per_txn", "cpu_data_us_per_txn", "cpu_lock_us_per_txn", "cpu_processes_us_per_txn", "machine_busy_cores",
	"setup", "ttl_ms", "expired", "fenced"}

func (r *Result) CSVRow() []string {
	i := func(x int64) string { return strconv.FormatInt(x, 10) }
	return []string{r.Started.UTC().Format(time.RFC3339), r.Label, strconv.Itoa(r.Run), r.Series(), r.Locker, strconv.Itoa(r.Servers),
		r.Mix, r.Skew, strconv.FormatUint(r.Accounts, 10), strconv.Itoa(r.Clients), r.Writes,
		strconv.FormatFloat(r.Duration.Seconds(), 'f', -1, 64), strconv.FormatFloat(r.Goodput, 'f', 1, 64),
		i(r.All.Committed), i(r.All.Declined), i(r.All.Aborts), i(r.All.Errors), i(r.Dropped),
		i(r.All.P50), i(r.All.P99), i(r.All.P999),
		strconv.FormatBool(r.Audit.OK), i(r.Audit.Mismatch), strconv.Itoa(r.Audit.After.NegativeSavings),
		r.roleCPU(RoleClient), r.roleCPU(RoleData), r.roleCPU(RoleLock), r.processCPU(), r.busy(),
		r.Setup, strconv.FormatFloat(float64(r.TTL)/float64(time.Millisecond), 'f', -1, 64), i(r.Expired), i(r.Fenced)}
}

// The CPU columns are empty when the run measured nothing, and a role's
// when no process of it was measured.
func (r *Result) roleCPU(role string) string {
	v, ok := r.CPUPerTxn[role]
	if !ok {
		return ""
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// processCPU is "role:name=µs" for every measured process, space-separated.
func (r *Result) processCPU() string {
	parts := make([]string, len(r.CPU))
	for i, p := range r.CPU {
		parts[i] = p.Role + ":" + p.Name + "=" + strconv.FormatFloat(p.PerTxn, 'f', 2, 64)
	}
	return strings.Join(parts, " ")
}

func (r *Result) busy() string {
	if len(r.CPU) == 0 {
		return ""
	}
	return strconv.FormatFloat(r.MachineBusy, 'f', 2, 64)
}
