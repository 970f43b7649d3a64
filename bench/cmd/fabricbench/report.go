package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Targets from the fabric's brief.
const (
	targetEchoRatio  = 2.0     // tcpfab single-verb median / bare echo median
	targetRate64     = 400_000 // tcpfab verbs/s with 64 outstanding
	targetMemfabCore = 10e6    // memfab MaskedCAS 16 ops/s on one core
)

// median takes every cell's median over the runs.
func median(rs []result) result {
	if len(rs) == 1 {
		return rs[0]
	}
	out := rs[0]
	out.rows = slices.Clone(rs[0].rows)
	midD := func(f func(result) time.Duration) time.Duration {
		v := make([]time.Duration, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	midF := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	out.echoMed = midD(func(r result) time.Duration { return r.echoMed })
	out.echoP99 = midD(func(r result) time.Duration { return r.echoP99 })
	out.memfabCore = midF(func(r result) float64 { return r.memfabCore })
	for i := range out.rows {
		out.rows[i].med = midD(func(r result) time.Duration { return r.rows[i].med })
		out.rows[i].p99 = midD(func(r result) time.Duration { return r.rows[i].p99 })
		for j := range outstanding {
			out.rows[i].rate[j] = midF(func(r result) float64 { return r.rows[i].rate[j] })
		}
		out.rows[i].cpu = midD(func(r result) time.Duration { return r.rows[i].cpu })
		out.rows[i].serverCPU = midD(func(r result) time.Duration { return r.rows[i].serverCPU })
	}
	return out
}

func us(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/1e3) }

func report(w io.Writer, o options, r result) {
	server := "an in-process tcpfab server on loopback"
	if o.memnode != "" {
		server = "a memnode process (" + o.memnode + ") on loopback"
	}
	fmt.Fprintf(w, "fabricbench: %d run(s), median of runs per cell; %d latency samples, %v per rate cell; GOMAXPROCS=%d\n",
		o.runs, o.samples, o.duration, runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "tcpfab: client in this process, served by %s\n\n", server)
	fmt.Fprintln(w, "| fabric | verb | median µs | p99 µs | verbs/s @1 | verbs/s @16 | verbs/s @64 | CPU µs/verb @64 (client + memnode) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|")
	for _, x := range r.rows {
		cpu := us(x.cpu)
		if x.serverCPU > 0 {
			cpu += " + " + us(x.serverCPU)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.0f | %.0f | %.0f | %s |\n", x.fabric, x.verb, us(x.med), us(x.p99), x.rate[0], x.rate[1], x.rate[2], cpu)
	}
	fmt.Fprintf(w, "| tcp echo | %d B, 1 outstanding | %s | %s | | | | |\n\n", echoSize, us(r.echoMed), us(r.echoP99))

	worstRatio, worstVerb := 0.0, ""
	minRate, minVerb := 0.0, ""
	var ratios []string
	for _, x := range r.rows {
		if x.fabric != "tcpfab" {
			continue
		}
		ratio := float64(x.med) / float64(r.echoMed)
		ratios = append(ratios, fmt.Sprintf("%s %.2f", x.verb, ratio))
		if x.verb == "Send" {
			continue // node to node, not a memory-node verb
		}
		if ratio > worstRatio {
			worstRatio, worstVerb = ratio, x.verb
		}
		if minVerb == "" || x.rate[2] < minRate {
			minRate, minVerb = x.rate[2], x.verb
		}
	}
	fmt.Fprintf(w, "tcpfab median / echo median: %s\n", strings.Join(ratios, ", "))
	fmt.Fprintf(w, "memfab MaskedCAS 16 on one core (GOMAXPROCS=1, locked thread): %.1fM ops/s\n\n", r.memfabCore/1e6)
	met := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Fprintf(w, "target: tcpfab single-verb median <= %.0fx bare echo: worst %s at %.2fx: %s\n",
		targetEchoRatio, worstVerb, worstRatio, met(worstRatio <= targetEchoRatio))
	fmt.Fprintf(w, "target: tcpfab >= %d verbs/s at 64 outstanding: lowest %s at %.0f/s: %s\n",
		targetRate64, minVerb, minRate, met(minRate >= targetRate64))
	fmt.Fprintf(w, "target: memfab MaskedCAS 16 > %.0fM ops/s on one core: %.1fM: %s\n",
		targetMemfabCore/1e6, r.memfabCore/1e6, met(r.memfabCore > targetMemfabCore))
}
