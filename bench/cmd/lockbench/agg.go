package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/shiftlock/shiftlock-proxy/internal/stats"
)

// cell is the median over the runs of one configuration.
type cell struct {
	setup, lock, workload, keys string
	fail                        float64
	recovery                    bool
	n                           int
	med                         result // each numeric field is the median over the runs
	runs                        []result
}

// setupName names the fabric configuration of r: the fabric, and the IOPS
// cap if one was set.
func setupName(r *result) string {
	if r.Fabric == "model" {
		return "model" // its budget is part of the model
	}
	if r.IOPSCap > 0 {
		return fmt.Sprintf("%s-cap%gk", r.Fabric, r.IOPSCap/1000)
	}
	return r.Fabric
}

type cellID struct {
	setup, lock, workload, keys string
	fail, hold                  float64
	recovery                    bool
	clients, nodes              int
	entries                     uint64
}

// aggregate groups runs by configuration and takes medians.
func aggregate(rs []result) map[cellID]*cell {
	groups := map[cellID][]result{}
	for i := range rs {
		r := &rs[i]
		id := cellID{setupName(r), r.Lock, r.Workload, r.Keys, r.FailRate, r.HoldUS, r.Recovery == 1, r.Clients, r.Nodes, r.Entries}
		groups[id] = append(groups[id], *r)
	}
	out := map[cellID]*cell{}
	for id, g := range groups {
		c := &cell{setup: id.setup, lock: id.lock, workload: id.workload, keys: id.keys, fail: id.fail, recovery: id.recovery, n: len(g), runs: g}
		c.med = g[0]
		for _, col := range columns {
			vals := make([]float64, 0, len(g))
			numeric := true
			for i := range g {
				var v float64
				if _, err := fmt.Sscan(col.get(&g[i]), &v); err != nil {
					numeric = false
					break
				}
				vals = append(vals, v)
			}
			if numeric && col.name != "run" {
				_ = col.set(&c.med, fmtF(stats.Median(vals)))
			}
		}
		out[id] = c
	}
	return out
}

// find returns the cell for the given setup, lock, workload and keys of
// the failure-free grid (no failures, no recovery settings), or nil.
func find(cells map[cellID]*cell, setup, lock, workload, keys string) *cell {
	for id, c := range cells {
		if id.setup == setup && id.lock == lock && id.workload == workload && id.keys == keys && id.fail == 0 && !id.recovery {
			return c
		}
	}
	return nil
}

// gridRows reads the rows of one grid from a CSV: those labelled label, or
// with an empty label those of the last row's label, which names the
// newest grid. It returns the label it used.
func gridRows(path, label string) ([]result, string, error) {
	rs, err := readCSV(path)
	if err != nil {
		return nil, "", err
	}
	if label == "" {
		label = latestLabel(rs)
	}
	rs = withLabel(rs, label)
	if len(rs) == 0 {
		return nil, label, fmt.Errorf("no rows labelled %q in %s", label, path)
	}
	return rs, label, nil
}

// latestLabel is the label of the last row, which names the newest grid.
func latestLabel(rs []result) string {
	if len(rs) == 0 {
		return ""
	}
	return rs[len(rs)-1].Label
}

func withLabel(rs []result, label string) []result {
	var out []result
	for _, r := range rs {
		if r.Label == label {
			out = append(out, r)
		}
	}
	return out
}

// setups lists the setups present, memfab first.
func setups(cells map[cellID]*cell) []string {
	seen := map[string]bool{}
	for id := range cells {
		seen[id.setup] = true
	}
	var s []string
	for k := range seen {
		s = append(s, k)
	}
	sort.Slice(s, func(i, j int) bool {
		if strings.HasPrefix(s[i], "memfab") != strings.HasPrefix(s[j], "memfab") {
			return strings.HasPrefix(s[i], "memfab")
		}
		return s[i] < s[j]
	})
	return s
}

var workloadOrder = []string{"WI", "RI", "RO"}

func keysShort(k string) string {
	switch {
	case k == "uniform":
		return "Unif"
	case strings.HasPrefix(k, "zipf"):
		return "Zipf"
	}
	return k
}

// keysOf lists the key distributions present, uniform first.
func keysOf(cells map[cellID]*cell) []string {
	seen := map[string]bool{}
	for id := range cells {
		seen[id.keys] = true
	}
	var ks []string
	for k := range seen {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if (ks[i] == "uniform") != (ks[j] == "uniform") {
			return ks[i] == "uniform"
		}
		return ks[i] < ks[j]
	})
	return ks
}
