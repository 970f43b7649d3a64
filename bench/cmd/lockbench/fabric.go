package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/shiftlock/shiftlock-proxy/bench/rdma/latfab"
	"github.com/shiftlock/shiftlock-proxy/internal/stats"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
)

// cluster is the fabric of one run: the client endpoints and whatever serves
// them.
type cluster struct {
	eps     []rdma.Endpoint
	memnode *proc // the memnode process, when lockbench started one
	close   func()
}

// paperRecovery reports whether a ShiftLock run with failures can recover:
// the memory node must reset entries as ShiftLock §3.6 says, without first
// probing live members (memnode.Config.PaperRecovery).
func setupFabric(o options) (*cluster, error) {
	recovery := o.recovery && strings.HasPrefix(o.lock, "shiftlock")
	switch {
	case o.fabric == "memfab" || o.fabric == "model":
		mc := memnode.Config{Entries: o.entries, DeadAfter: time.Hour, PaperRecovery: recovery}
		if o.lock == "citron" {
			mc.RangeBytes = rangeTree(o).Bytes()
		}
		host := memnode.New(mc)
		f := memfab.New(host)
		cl := &cluster{close: host.Close}
		var lf *latfab.Fabric
		if o.fabric == "model" {
			lf = latfab.New(latfab.Config{Verb: o.modelVerb, Send: o.modelSend, IOPS: o.iopsCap, AtomicPerAddr: o.modelAtomic, AtomicBlocks: o.modelAtomicBlocks, AtomicUnits: o.modelAtomicUnits})
			cl.close = func() { lf.Close(); host.Close() }
		}
		for i := 0; i < o.nodes; i++ {
			ep, err := f.Join(fmt.Sprintf("lockbench-%d", i))
			if err != nil {
				cl.close()
				return nil, err
			}
			if lf != nil {
				cl.eps = append(cl.eps, lf.Wrap(ep))
			} else {
				cl.eps = append(cl.eps, ep)
			}
		}
		return cl, nil
	case o.fabric == "tcp":
		p, err := startMemnode(o, recovery)
		if err != nil {
			return nil, err
		}
		cl, err := dialAll(p.addr, o.nodes)
		if err != nil {
			p.stop()
			return nil, err
		}
		cl.memnode = p
		inner := cl.close
		cl.close = func() { inner(); p.stop() }
		return cl, nil
	default:
		if recovery {
			fmt.Fprintln(os.Stderr, "lockbench: warning: ShiftLock recovers from failures only if the memnode runs the paper's recovery policy (memnode.Config.PaperRecovery)")
		}
		return dialAll(strings.TrimPrefix(o.fabric, "tcp://"), o.nodes)
	}
}

// dialAll joins n nodes to the memnode at addr and keeps them alive with
// heartbeats, which a run's verb counts include (one WRITE and one READ per
// node per heartbeat interval).
func dialAll(addr string, n int) (*cluster, error) {
	cl := &cluster{}
	var stops []func()
	cl.close = func() {
		for _, s := range stops {
			s()
		}
		for _, ep := range cl.eps {
			_ = ep.Close()
		}
	}
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ep, err := tcpfab.Dial(ctx, addr, tcpfab.Config{Name: fmt.Sprintf("lockbench-%d", i)})
		cancel()
		if err != nil {
			cl.close()
			return nil, err
		}
		cl.eps = append(cl.eps, ep)
		hb := rdma.StartHeartbeat(ep, func() time.Duration { return 0 }, nil)
		stops = append(stops, hb.Stop)
	}
	return cl, nil
}

// measureRTT times uncontended READs of one entry: the fabric's round trip,
// by which the baselines' published wait parameters are scaled.
func measureRTT(ep rdma.Endpoint, probes int) (time.Duration, error) {
	if probes <= 0 {
		return paperRTT, nil
	}
	var buf [16]byte
	addr := ep.Layout().EntryAddr(ep.Layout().LockEntries - 1)
	ds := make([]time.Duration, 0, probes)
	for i := 0; i < probes; i++ {
		t := time.Now()
		if err := ep.Read(context.Background(), addr, buf[:]); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(t))
	}
	if len(ds) == 0 {
		return 0, errors.New("no RTT samples")
	}
	return stats.Median(ds), nil
}
