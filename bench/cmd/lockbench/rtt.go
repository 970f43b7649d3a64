package main

import (
	"fmt"
	"io"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/stats"
)

// rttCmd measures the fabric's uncontended round trip and prints the
// baseline parameters scaled from it as lockbench flags, so that a series of
// runs can share one calibration instead of each scaling by its own noisy
// measurement.
func rttCmd(args []string, stdout, stderr io.Writer) error {
	o, err := parseRun(args, stderr)
	if err != nil {
		return err
	}
	o.nodes, o.clients = 1, 1
	cl, err := setupFabric(o)
	if err != nil {
		return err
	}
	defer cl.close()
	probes := max(o.rttProbes, 1000)
	var rtts []time.Duration
	for i := 0; i < 5; i++ {
		d, err := measureRTT(cl.eps[0], probes)
		if err != nil {
			return err
		}
		rtts = append(rtts, d)
	}
	rtt := stats.Median(rtts)
	p := resolveParams(options{lease: o.lease, artifactOmega: o.artifactOmega}, rtt)
	fmt.Fprintf(stderr, "lockbench: %s round trip %v (medians of 5 x %d READs: %v)\n", o.fabric, rtt, probes, rtts)
	fmt.Fprintf(stdout, "-cas-backoff %v -dslr-omega %v -dslr-backoff %v\n", p.casBackoff, p.dslrOmega, p.dslrR)
	return nil
}
