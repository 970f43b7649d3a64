package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// printTable writes results as an aligned text table.
func printTable(w io.Writer, rs []result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "lock\tfabric\tkeys\twl\tgoodput/s\tR p50\tR p99\tR p999\tW p50\tW p99\tW p999\tatomics\tREADs\tWRITEs\tSENDs\tmemnode IOPS\tmemnode cpu\tclient cpu\tother cpu\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t%s\t%.2f\t%.2f\t\n",
			r.Lock, r.Fabric, r.Keys, r.Workload, r.Goodput,
			us(r.RP50), us(r.RP99), us(r.RP999), us(r.WP50), us(r.WP99), us(r.WP999),
			r.Atomics, r.Reads, r.Writes, r.Sends, r.MemnodeIOPS, cpu(r.MemnodeCPU), r.ClientCPU, r.OtherCPU)
	}
	_ = tw.Flush()
}

// us formats a latency in µs; negative means "no samples".
func us(v float64) string {
	if v < 0 {
		return "-"
	}
	return (time.Duration(v * 1e3)).Round(time.Microsecond / 10).String()
}

func cpu(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}
