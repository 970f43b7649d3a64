package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/resp"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// metrics are the proxy's Prometheus series.
type metrics struct {
	reg      *prometheus.Registry
	acquire  *prometheus.HistogramVec
	commands *prometheus.CounterVec
	expired  prometheus.Counter
	verbs    *rdma.Collector
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		acquire: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "proxy_acquire_seconds",
			Help:    "Time to acquire a lock, by mode, outcome (granted, busy, error) and whether it queued behind a holder.",
			Buckets: prometheus.ExponentialBuckets(20e-6, 2, 20),
		}, []string{"mode", "outcome", "queued"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_commands_total", Help: "RESP commands served, by command.",
		}, []string{"command"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "proxy_ttl_expirations_total", Help: "Locks released by the proxy because their TTL passed.",
		}),
		verbs: rdma.NewCollector(),
	}
	m.reg.MustRegister(m.acquire, m.commands, m.expired, m.verbs,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) onAcquire(mode shiftlock.Mode, took time.Duration, queued, ok bool) {
	outcome := "granted"
	if !ok {
		outcome = "busy"
	}
	q := "no"
	if queued {
		q = "yes"
	}
	m.acquire.WithLabelValues(mode.String(), outcome, q).Observe(took.Seconds())
}

func (m *metrics) onCommand(name string, _ time.Duration) { m.commands.WithLabelValues(name).Inc() }

// watch exports the lock table, the server and each memory node's client.
func (m *metrics) watch(srv *resp.Server, lm *lockmap.Map) {
	gauge := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	gauge("proxy_connected_clients", "Connected RESP clients.", func() float64 { return float64(srv.Clients()) })
	gauge("proxy_locks_held", "Keys held through this proxy.", func() float64 { return float64(lm.Count()) })
	for _, d := range lm.Domains() {
		d := d
		labels := prometheus.Labels{"memnode": d.Name}
		st := d.Client.Stats()
		counter := func(name, help string, f func() uint64) {
			m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
				func() float64 { return float64(f()) }))
		}
		counter("proxy_grants_exclusive_total", "Exclusive grants.", st.ExclusiveGrants.Load)
		counter("proxy_grants_shared_total", "Shared grants.", st.SharedGrants.Load)
		counter("proxy_handovers_total", "Writer-to-writer handovers sent.", st.Handovers.Load)
		counter("proxy_mode_changes_total", "Writer-to-readers transfers.", st.ModeChanges.Load)
		counter("proxy_try_failures_total", "Try-locks (SET NX without waiting) that found the lock held.", st.TryFailures.Load)
		counter("proxy_local_handovers_total", "Notifications delivered in-process.", st.LocalSends.Load)
		counter("proxy_remote_handovers_total", "Notifications sent to other proxies.", st.RemoteSends.Load)
		counter("proxy_abandoned_waits_total", "Queued acquires whose client gave up; completed and released in the background.", st.Abandoned.Load)
		counter("proxy_recovery_requests_total", "Recovery requests sent to the memory node.", st.RecoveryRequests.Load)
		counter("proxy_locks_lost_total", "Releases that found the lock no longer theirs.", st.Lost.Load)
		if d.Lease != nil {
			m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "proxy_lease_ok", Help: "1 while this proxy's lease with the memory node is valid; 0 means its locks there are reported lost.", ConstLabels: labels,
			}, func() float64 {
				if d.Lease.Valid() != nil {
					return 0
				}
				return 1
			}))
		}
		ep := d.Client.Endpoint()
		m.verbs.Add("proxy", ep.Node, ep.Counters())
	}
}
