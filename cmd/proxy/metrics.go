package main

import (
	"sync"
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
	hold     *prometheus.HistogramVec
	commands *prometheus.CounterVec
	expired  prometheus.Counter
	rejoins  *prometheus.CounterVec
	verbs    *rdma.Collector
	expMu    sync.Mutex
	exported map[int]*rdma.Counters // verb counters exported per memory node

	// The vectors' children, resolved once: a label lookup hashes its
	// values under a lock, which every command would pay.
	acquireBy [3][2][2]prometheus.Observer  // [mode][ok][queued]
	holdBy    [3][2]prometheus.Observer     // [mode][expired]
	commandBy map[string]prometheus.Counter // every name resp reports; read-only after newMetrics
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		acquire: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "proxy_acquire_seconds",
			Help:    "Time to acquire a lock, by mode, outcome (granted, busy, error) and whether it queued behind a holder.",
			Buckets: prometheus.ExponentialBuckets(20e-6, 2, 20),
		}, []string{"mode", "outcome", "queued"}),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "proxy_hold_seconds",
			Help:    "How long locks were held through this proxy, by mode and how the hold ended (released by its client, or expired by its TTL).",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2.5, 16),
		}, []string{"mode", "end"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_commands_total", Help: "RESP commands served, by command.",
		}, []string{"command"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "proxy_ttl_expirations_total", Help: "Locks released by the proxy because their TTL passed.",
		}),
		rejoins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_rejoins_total", Help: "Times the proxy rejoined a memory node after its membership died (fenced, or the memory node restarted); every hold of the old membership was lost.",
		}, []string{"memnode"}),
		verbs:    rdma.NewCollector(),
		exported: map[int]*rdma.Counters{},
	}
	m.commandBy = map[string]prometheus.Counter{}
	for _, name := range resp.CommandNames() {
		m.commandBy[name] = m.commands.WithLabelValues(name)
	}
	for _, mode := range []shiftlock.Mode{shiftlock.Exclusive, shiftlock.Shared} {
		for oi, outcome := range []string{"busy", "granted"} {
			for qi, q := range []string{"no", "yes"} {
				m.acquireBy[mode][oi][qi] = m.acquire.WithLabelValues(mode.String(), outcome, q)
			}
		}
		for ei, end := range []string{"released", "expired"} {
			m.holdBy[mode][ei] = m.hold.WithLabelValues(mode.String(), end)
		}
	}
	m.reg.MustRegister(m.acquire, m.hold, m.commands, m.expired, m.rejoins, m.verbs,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "proxy_peer_refused_connections_total",
		Help: "Connections to the peer port closed because they failed the fabric secret's challenge (the log shows a sample).",
	}, func() float64 { return float64(peerRefusals.Count()) }))
	return m
}

func (m *metrics) onAcquire(mode shiftlock.Mode, took time.Duration, queued, ok bool) {
	mi, oi, qi := int(mode), 0, 0
	if ok {
		oi = 1
	}
	if queued {
		qi = 1
	}
	if mi < 0 || mi >= len(m.acquireBy) {
		mi = 0
	}
	o := m.acquireBy[mi][oi][qi]
	if o == nil {
		outcome, q := "busy", "no"
		if ok {
			outcome = "granted"
		}
		if queued {
			q = "yes"
		}
		o = m.acquire.WithLabelValues(mode.String(), outcome, q)
	}
	o.Observe(took.Seconds())
}

func (m *metrics) onHoldEnd(mode shiftlock.Mode, held time.Duration, expired bool) {
	mi, ei := int(mode), 0
	if expired {
		ei = 1
	}
	if mi < 0 || mi >= len(m.holdBy) || m.holdBy[mi][ei] == nil {
		return
	}
	m.holdBy[mi][ei].Observe(held.Seconds())
}

func (m *metrics) onCommand(name string) {
	if c, ok := m.commandBy[name]; ok {
		c.Inc()
		return
	}
	m.commands.WithLabelValues(name).Inc() // not in resp.CommandNames: a new name
}

// watch exports the lock table, the server and each memory node's client.
func (m *metrics) watch(srv *resp.Server, lm *lockmap.Map) {
	gauge := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	gauge("proxy_connected_clients", "Connected RESP clients.", func() float64 { return float64(srv.Clients()) })
	gauge("proxy_locks_held", "Keys held through this proxy.", func() float64 { return float64(lm.Count()) })
	gauge("proxy_queued_commands", "Commands waiting in a lock's queue right now (INFO blocked_clients).", func() float64 { return float64(srv.Blocked()) })
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "proxy_rejected_connections_total", Help: "Connections refused because maxclients were connected.",
	}, func() float64 { return float64(srv.Refused()) }))
	total := func(name, help string, f func() int64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) }))
	}
	total("proxy_accept_failures_total", "Accepts of client connections that failed (out of file descriptors, mostly); each is retried.", srv.AcceptFailures)
	total("proxy_tls_handshakes_refused_total", "TLS connections closed because the most handshakes allowed at once were in flight.", srv.HandshakesRefused)
	total("proxy_cross_protocol_closed_total", "Connections closed for sending POST or Host: as a command (a web page posting to the RESP port).", srv.CrossProtocolAttempts)
	rs := lm.RouteStats()
	routed := func(name, help string, f func() uint64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) }))
	}
	routed("proxy_routed_forwarded_total", "Acquires sent to their key's home proxy (quorum_routing).", rs.Forwarded.Load)
	routed("proxy_routed_fallbacks_total", "Acquires whose home proxy could not be reached, taken here instead.", rs.Fallbacks.Load)
	routed("proxy_routed_home_acquires_total", "Locks taken here as their key's home proxy.", rs.HomeAcquires.Load)
	routed("proxy_routed_joined_total", "Acquires answered with a lock their key and token already held here, for this proxy or another.", rs.Joined.Load)
	gauge("proxy_routers", "Proxies routing keys on this proxy's memory node, itself included (0: quorum_routing off).", func() float64 { return float64(rs.Routers.Load()) })
	for i, d := range lm.Domains() {
		i := i
		cur := func() *lockmap.Domain { return lm.Domains()[i] }
		labels := prometheus.Labels{"memnode": d.Name}
		m.rejoins.WithLabelValues(d.Name) // exported at 0 before the first rejoin
		// Counters restart from zero when the proxy rejoins, as after a
		// process restart; Prometheus' rate() handles such resets.
		counter := func(name, help string, f func(*shiftlock.Stats) uint64) {
			m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
				func() float64 { return float64(f(cur().Client.Stats())) }))
		}
		counter("proxy_grants_exclusive_total", "Exclusive grants.", func(s *shiftlock.Stats) uint64 { return s.ExclusiveGrants.Load() })
		counter("proxy_grants_shared_total", "Shared grants.", func(s *shiftlock.Stats) uint64 { return s.SharedGrants.Load() })
		counter("proxy_handovers_total", "Writer-to-writer handovers sent.", func(s *shiftlock.Stats) uint64 { return s.Handovers.Load() })
		counter("proxy_mode_changes_total", "Writer-to-readers transfers.", func(s *shiftlock.Stats) uint64 { return s.ModeChanges.Load() })
		counter("proxy_waits_total", "Acquisitions that had to wait: queued behind a writer, or for readers or an epoch.", func(s *shiftlock.Stats) uint64 { return s.Waits.Load() })
		counter("proxy_try_failures_total", "Try-locks (SET NX without waiting) that found the lock held.", func(s *shiftlock.Stats) uint64 { return s.TryFailures.Load() })
		counter("proxy_local_handovers_total", "Notifications delivered in-process.", func(s *shiftlock.Stats) uint64 { return s.LocalSends.Load() })
		counter("proxy_remote_handovers_total", "Notifications sent to other proxies.", func(s *shiftlock.Stats) uint64 { return s.RemoteSends.Load() })
		counter("proxy_abandoned_waits_total", "Queued acquires whose client gave up; completed and released in the background.", func(s *shiftlock.Stats) uint64 { return s.Abandoned.Load() })
		counter("proxy_recovery_requests_total", "Recovery requests sent to the memory node.", func(s *shiftlock.Stats) uint64 { return s.RecoveryRequests.Load() })
		counter("proxy_locks_lost_total", "Releases that found the lock no longer theirs.", func(s *shiftlock.Stats) uint64 { return s.Lost.Load() })
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "proxy_heartbeats_total", Help: "Heartbeats posted to the memory node (each one Write and one Read in one round trip, counted in rdma_verbs_total too).", ConstLabels: labels,
		}, func() float64 {
			if l := cur().Lease; l != nil {
				return float64(l.Beats())
			}
			return 0
		}))
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "proxy_lease_ok", Help: "1 while this proxy's lease with the memory node is valid; 0 means its locks there are reported lost.", ConstLabels: labels,
		}, func() float64 {
			if l := cur().Lease; l != nil && l.Valid() != nil {
				return 0
			}
			return 1
		}))
		m.watchDomain(lm, i)
	}
}

// watchDomain exports the verb counters of memory node i's current
// membership in place of the previous one's.
func (m *metrics) watchDomain(lm *lockmap.Map, i int) {
	ep := lm.Domains()[i].Client.Endpoint()
	m.expMu.Lock()
	defer m.expMu.Unlock()
	if old := m.exported[i]; old != nil {
		m.verbs.Remove(old)
	}
	m.exported[i] = ep.Counters()
	m.verbs.Add("proxy", ep.Node, ep.Counters())
}
