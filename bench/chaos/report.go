package chaos

import (
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"
)

// Report renders a campaign's result as Markdown.
func Report(cfg Config, r Result) string {
	cfg.defaults()
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	model := "unknown CPU"
	if out, err := exec.Command("sh", "-c", "lscpu | sed -n 's/^Model name:[[:space:]]*//p'").Output(); err == nil && len(out) > 0 {
		model = strings.TrimSpace(string(out))
	}
	mems := "1 memnode process (with a state directory)"
	if cfg.HA {
		w("## Fault campaign with failover (`make chaos`, HA)\n\n")
		mems = "a 3-member etcd, 2 memnode processes campaigning for one shard (etcd lease 1s)"
	} else {
		w("## Fault campaign (`make chaos`)\n\n")
	}
	keepers := ""
	if cfg.Keepers > 0 {
		keepers = fmt.Sprintf(", and %d keepers holding exclusive locks on uniform keys for %v-%v with TTL %v", cfg.Keepers, cfg.TTL, cfg.TTL*9/5, cfg.keeperTTL())
	}
	var more []string
	if cfg.ConstKeys > 0 {
		more = append(more, fmt.Sprintf("%d clients locking %d keys with the constant value \"1\" (SET NX and LOCK.ACQUIRE), one per key and proxy", cfg.ConstKeys*cfg.Proxies, cfg.ConstKeys))
	}
	if cfg.Lapsers > 0 {
		more = append(more, fmt.Sprintf("%d clients that let %v locks lapse, then extend and release them with their token", cfg.Lapsers, lapseTTL))
	}
	if cfg.RangeClients > 0 {
		rk := ""
		if cfg.Keepers > 0 {
			rk = fmt.Sprintf(" and a range keeper (exclusive spans held %v-%v with TTL %v)", cfg.TTL, cfg.TTL*9/5, cfg.keeperTTL())
		}
		more = append(more, fmt.Sprintf("%d range-lock clients on %d names (spans of 16 units to the whole tree, %.0f%% shared, a quarter of them tries with WAIT 0)%s, and 2 more on the embedded proxy", cfg.RangeClients, cfg.RangeNames, rangeShared*100, rk))
	}
	if cfg.Embedded > 0 {
		how := "kill -9 and restart"
		if slices.Contains(cfg.Kinds, "embedded-stop") {
			how = fmt.Sprintf("kill -9, or SIGTERM with a drain of %v, and restart", drainTimeout)
		}
		more = append(more, fmt.Sprintf("a proxy on its embedded memory node (a state directory, %s) with %d clients and a keeper on keys of its own", how, cfg.Embedded))
	}
	extra := ""
	if len(more) > 0 {
		extra = "; also " + strings.Join(more, "; ")
	}
	w("Run on %s, %s, %d cores. %v campaign: %s, %d proxy processes, %d clients on %d keys (Zipf %.2f), %.0f%% shared acquires, TTL %v, WAIT %v%s%s; memnode dead_after %v; one fault every %v, rotating through: %s.\n\n",
		time.Now().Format("2006-01-02"), model, runtime.NumCPU(), r.Elapsed.Round(time.Second), mems, cfg.Proxies, cfg.Clients, cfg.Keys, cfg.Zipf,
		cfg.Shared*100, cfg.TTL, cfg.Wait, keepers, extra, cfg.DeadAfter, cfg.FaultEvery, strings.Join(cfg.Kinds, ", "))
	w("| measure | value |\n|---|---|\n")
	w("| acquire requests | %d |\n", r.Ops)
	w("| granted / busy (nil after WAIT) / refused with an error | %d / %d / %d |\n", r.Granted, r.Busy, r.Errors)
	if r.RangeOps > 0 {
		w("| of which range-lock spans (LOCK.RANGE.ACQUIRE): asked / granted | %d / %d |\n", r.RangeOps, r.RangeGranted)
	}
	var kinds []string
	total := 0
	for k, n := range r.Faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(kinds)
	var ek []string
	for k, n := range r.ErrorKinds {
		ek = append(ek, fmt.Sprintf("%s (%d)", k, n))
	}
	sort.Strings(ek)
	if len(ek) > 0 {
		w("| errors by kind | %s |\n", strings.Join(ek, "; "))
	}
	w("| faults injected | %d (%s) |\n", total, strings.Join(kinds, ", "))
	w("| **violations** (overlapping conflicting holders, of a key or of overlapping spans of a name; or fences out of order) | **%d** |\n", len(r.Violations))
	w("| **lapsed locks extended or released** (a lock past its TTL answered as still held) | **%d** |\n", r.Lapsed)
	w("| **stuck requests** (no answer within WAIT + 2 s = %v from a proxy not under a fault) | **%d** |\n", r.RequestBound, r.Stuck)
	w("| slowest answer from a healthy proxy | %v |\n", r.MaxAnswer.Round(time.Millisecond))
	if n := len(r.Recoveries); n > 0 {
		w("| recovery after kill -9 of a proxy holding locks (%d keys): p50 / max | %v / %v (bound dead_after + horizon + 1 s = %v: %s) |\n",
			n, r.Recoveries[n/2].Round(time.Millisecond), r.Recoveries[n-1].Round(time.Millisecond), r.RecoveryBound,
			map[bool]string{true: "met", false: "**exceeded**"}[r.Recoveries[n-1] <= r.RecoveryBound])
	} else {
		w("| recovery after kill -9 of a proxy holding locks | no killed proxy held a lock at the time |\n")
	}
	if cfg.HA {
		if n := len(r.Failovers); n > 0 {
			w("| failover (memnode-kill or -partition of the active memory node -> first grant from its successor's table), %d failovers: p50 / max | %v / %v (bound horizon + dead_after + 2 s = %v: %s) |\n",
				n, r.Failovers[n/2].Round(time.Millisecond), r.Failovers[n-1].Round(time.Millisecond), r.FailoverBound,
				map[bool]string{true: "met", false: "**exceeded**"}[r.Failovers[n-1] <= r.FailoverBound])
		} else {
			w("| failover | no failover was measured |\n")
		}
		planned := r.Faults["memnode-kill"] + r.Faults["memnode-partition"]
		w("| generations started (takeovers) | %d (%d from injected faults, %d unplanned) |\n", r.Takeovers, planned, r.Takeovers-planned)
	}
	if len(r.Violations) > 0 {
		w("\nFirst violations:\n\n")
		for i, v := range r.Violations {
			if i == 10 {
				break
			}
			w("- %v\n", v)
		}
	}
	return b.String()
}
