package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// result is one run, one CSV row.
type result struct {
	Time      string
	Label     string
	Run       int
	Lock      string
	Fabric    string
	Nodes     int
	Clients   int
	Entries   uint64
	Keys      string
	Workload  string
	Readers   float64
	HoldUS    float64
	FailRate  float64
	Recovery  int // 1 with the failure settings (-recovery or -fail-rate)
	DurationS float64

	Cycles  uint64
	Goodput float64 // acquire-release cycles per second
	// Acquire latency percentiles in µs, readers (R) and writers (W); -1
	// when the run had none of that kind.
	RP50, RP99, RP999 float64
	WP50, WP99, WP999 float64
	// Verbs per acquire-release cycle, from the client endpoints' counters.
	Atomics, Reads, Writes, Sends, RoundTrips float64
	// Verbs per second that reached the memory node.
	MemnodeIOPS float64
	RTTus       float64
	// CPU used, in cores: the memnode process (when lockbench started it,
	// else -1) and this process.
	MemnodeCPU, ClientCPU float64
	// OtherCPU is what the rest of the machine used meanwhile, in cores.
	OtherCPU float64
	// Attempts is how many times the run was made (see -max-other-cpu).
	Attempts int
	IOPSCap  float64
	// HotRate is requests per second for key 0, the hottest key, HotBusy
	// the share of the window during which it was held, and HotAsked the
	// share during which it was asked for or held.
	HotRate, HotBusy, HotAsked float64
	Abandoned, Errors          uint64
	Params, Stats              string
	// Phases are ShiftLock's mean phase times in µs ("W-IA=2.05 ...").
	Phases string
}

type column struct {
	name string
	get  func(*result) string
	set  func(*result, string) error
}

func fmtF(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

func fcol(name string, p func(*result) *float64) column {
	return column{name, func(r *result) string { return fmtF(*p(r)) },
		func(r *result, s string) (err error) { *p(r), err = strconv.ParseFloat(s, 64); return }}
}

func icol(name string, p func(*result) *int) column {
	return column{name, func(r *result) string { return strconv.Itoa(*p(r)) },
		func(r *result, s string) (err error) { *p(r), err = strconv.Atoi(s); return }}
}

func ucol(name string, p func(*result) *uint64) column {
	return column{name, func(r *result) string { return strconv.FormatUint(*p(r), 10) },
		func(r *result, s string) (err error) { *p(r), err = strconv.ParseUint(s, 10, 64); return }}
}

func scol(name string, p func(*result) *string) column {
	return column{name, func(r *result) string { return *p(r) },
		func(r *result, s string) error { *p(r) = s; return nil }}
}

// columns fixes the CSV layout; readers look columns up by name, so new
// columns can be added without breaking old files.
var columns = []column{
	scol("time", func(r *result) *string { return &r.Time }),
	scol("label", func(r *result) *string { return &r.Label }),
	icol("run", func(r *result) *int { return &r.Run }),
	scol("lock", func(r *result) *string { return &r.Lock }),
	scol("fabric", func(r *result) *string { return &r.Fabric }),
	icol("nodes", func(r *result) *int { return &r.Nodes }),
	icol("clients", func(r *result) *int { return &r.Clients }),
	ucol("entries", func(r *result) *uint64 { return &r.Entries }),
	scol("keys", func(r *result) *string { return &r.Keys }),
	scol("workload", func(r *result) *string { return &r.Workload }),
	fcol("readers", func(r *result) *float64 { return &r.Readers }),
	fcol("hold_us", func(r *result) *float64 { return &r.HoldUS }),
	fcol("fail_rate", func(r *result) *float64 { return &r.FailRate }),
	icol("recovery", func(r *result) *int { return &r.Recovery }),
	fcol("duration_s", func(r *result) *float64 { return &r.DurationS }),
	ucol("cycles", func(r *result) *uint64 { return &r.Cycles }),
	fcol("goodput", func(r *result) *float64 { return &r.Goodput }),
	fcol("read_p50_us", func(r *result) *float64 { return &r.RP50 }),
	fcol("read_p99_us", func(r *result) *float64 { return &r.RP99 }),
	fcol("read_p999_us", func(r *result) *float64 { return &r.RP999 }),
	fcol("write_p50_us", func(r *result) *float64 { return &r.WP50 }),
	fcol("write_p99_us", func(r *result) *float64 { return &r.WP99 }),
	fcol("write_p999_us", func(r *result) *float64 { return &r.WP999 }),
	fcol("atomics_per_cycle", func(r *result) *float64 { return &r.Atomics }),
	fcol("reads_per_cycle", func(r *result) *float64 { return &r.Reads }),
	fcol("writes_per_cycle", func(r *result) *float64 { return &r.Writes }),
	fcol("sends_per_cycle", func(r *result) *float64 { return &r.Sends }),
	fcol("round_trips_per_cycle", func(r *result) *float64 { return &r.RoundTrips }),
	fcol("memnode_iops", func(r *result) *float64 { return &r.MemnodeIOPS }),
	fcol("rtt_us", func(r *result) *float64 { return &r.RTTus }),
	fcol("memnode_cpu", func(r *result) *float64 { return &r.MemnodeCPU }),
	fcol("client_cpu", func(r *result) *float64 { return &r.ClientCPU }),
	fcol("other_cpu", func(r *result) *float64 { return &r.OtherCPU }),
	icol("attempts", func(r *result) *int { return &r.Attempts }),
	fcol("iops_cap", func(r *result) *float64 { return &r.IOPSCap }),
	fcol("hot_key_rate", func(r *result) *float64 { return &r.HotRate }),
	fcol("hot_key_busy", func(r *result) *float64 { return &r.HotBusy }),
	fcol("hot_key_asked", func(r *result) *float64 { return &r.HotAsked }),
	ucol("abandoned", func(r *result) *uint64 { return &r.Abandoned }),
	ucol("errors", func(r *result) *uint64 { return &r.Errors }),
	scol("params", func(r *result) *string { return &r.Params }),
	scol("stats", func(r *result) *string { return &r.Stats }),
	scol("phases", func(r *result) *string { return &r.Phases }),
}

// appendCSV appends r to path, writing the header first if the file is new
// or empty. A file written by an older lockbench keeps its own columns: the
// row follows its header, and columns it lacks are dropped.
func appendCSV(path string, r *result) error {
	hdr, err := csvHeader(path)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if hdr == nil {
		for _, c := range columns {
			hdr = append(hdr, c.name)
		}
		_ = w.Write(hdr)
	}
	byName := map[string]column{}
	for _, c := range columns {
		byName[c.name] = c
	}
	row := make([]string, len(hdr))
	for i, h := range hdr {
		if c, ok := byName[h]; ok {
			row[i] = c.get(r)
		}
	}
	_ = w.Write(row)
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// csvHeader is the header of an existing, non-empty CSV file, or nil.
func csvHeader(path string) ([]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	hdr, err := csv.NewReader(f).Read()
	if errors.Is(err, io.EOF) {
		return nil, nil
	}
	return hdr, err
}

// readCSV reads every row of path. Columns it does not know are ignored and
// columns missing from the file keep their zero value.
func readCSV(path string) ([]result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rd := csv.NewReader(f)
	rd.FieldsPerRecord = -1
	hdr, err := rd.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	idx := map[string]int{}
	for i, h := range hdr {
		idx[h] = i
	}
	var rs []result
	for line := 2; ; line++ {
		rec, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return rs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		var r result
		for _, c := range columns {
			i, ok := idx[c.name]
			if !ok || i >= len(rec) || rec[i] == "" {
				continue
			}
			if err := c.set(&r, rec[i]); err != nil {
				return nil, fmt.Errorf("%s:%d: column %s: %w", path, line, c.name, err)
			}
		}
		rs = append(rs, r)
	}
}

func nowStamp() string { return time.Now().UTC().Format(time.RFC3339) }
