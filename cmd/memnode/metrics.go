package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
)

// registry holds what /metrics exports: the verbs that reached this memory
// node (the paper's Fig. 6 counts), its control-path events and the
// connections srv refused.
func registry(host *memnode.Server, srv *tcpfab.Server) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	col := rdma.NewCollector()
	col.Add("memnode", func() rdma.NodeID { return 0 }, host.Counters())
	st := host.Stats()
	reg.MustRegister(
		col,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "memnode_members", Help: "Live member nodes.",
		}, func() float64 { return float64(len(host.Members())) }),
		counterFunc("memnode_joins_total", "Nodes that joined.", st.Joins.Load),
		counterFunc("memnode_leaves_total", "Nodes that left.", st.Leaves.Load),
		counterFunc("memnode_deaths_total", "Nodes declared dead after missing heartbeats.", st.Deaths.Load),
		counterFunc("memnode_joins_refused_per_host_total",
			"Joins refused because members from the joining host held max_nodes_per_host node IDs.", st.JoinsRefusedPerHost.Load),
		counterFunc("memnode_refused_connections_total",
			"Connections closed because they failed the fabric secret's challenge (the log shows a sample).", srv.Refused),
		counterFunc("memnode_accept_failures_total",
			"Accepts that failed and were retried after a pause (out of file descriptors, mostly).", srv.AcceptFailures),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "memnode_range_trees", Help: "Range-lock trees in the pool (range_trees).",
		}, func() float64 { return float64(host.RangeTrees()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "memnode_range_trees_bound", Help: "Range-lock trees bound to a name in use.",
		}, func() float64 { return float64(host.RangeBound()) }),
		counterFunc("memnode_range_binds_total", "Range-lock names bound for a member (its first use of the name).", st.RangeBinds.Load),
		counterFunc("memnode_range_binds_refused_total", "Range-lock names refused because every tree was bound.", st.RangeFull.Load),
		counterFunc("memnode_range_repairs_total", "Range-lock trees rebuilt after a user died or asked.", st.RangeRepairs.Load),
	)
	recoveries := []struct {
		result string
		load   func() uint64
	}{
		{"done", st.Recoveries.Load},
		{"stale", st.RecoveriesStale.Load},
		{"refused", st.RecoveriesRef.Load},
	}
	for _, r := range recoveries {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "memnode_recoveries_total",
			Help:        "Recovery requests by result.",
			ConstLabels: prometheus.Labels{"result": r.result},
		}, func() float64 { return float64(r.load()) }))
	}
	return reg
}

func counterFunc(name, help string, load func() uint64) prometheus.CounterFunc {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
		func() float64 { return float64(load()) })
}
