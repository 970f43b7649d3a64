package rdma

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Verb is a kind of fabric operation, as counted by Counters.
type Verb uint8

const (
	VerbRead Verb = iota
	VerbWrite
	VerbCAS
	VerbFAA
	VerbMaskedCAS
	VerbMaskedFAA
	VerbSend
	// VerbBatch counts doorbells: one per Post or single verb, i.e. round trips.
	VerbBatch
	// VerbControl counts control-path calls (join, recovery, peers).
	VerbControl
	NumVerbs
)

var verbNames = [NumVerbs]string{"read", "write", "cas", "faa", "masked_cas", "masked_faa", "send", "batch", "control"}

func (v Verb) String() string {
	if v < NumVerbs {
		return verbNames[v]
	}
	return "verb(" + strconv.Itoa(int(v)) + ")"
}

// IsAtomic reports whether v is one of the four atomics.
func (v Verb) IsAtomic() bool { return v >= VerbCAS && v <= VerbMaskedFAA }

type counter struct {
	n atomic.Uint64
	_ [56]byte
}

// Counters count verbs by kind and direction. Outbound is what a node
// initiated; inbound is what arrived at it (verbs at a memory node, Sends at
// a client node). The zero value is ready to use.
type Counters struct {
	out, in [NumVerbs]counter
}

func (c *Counters) Out(v Verb)              { c.out[v].n.Add(1) }
func (c *Counters) In(v Verb)               { c.in[v].n.Add(1) }
func (c *Counters) AddOut(v Verb, n uint64) { c.out[v].n.Add(n) }
func (c *Counters) AddIn(v Verb, n uint64)  { c.in[v].n.Add(n) }

// Snapshot reads all counters. Individual counters are exact; the set is not
// one atomic cut, which is fine for rates and per-cycle averages.
func (c *Counters) Snapshot() Snapshot {
	var s Snapshot
	for v := Verb(0); v < NumVerbs; v++ {
		s.Out[v] = c.out[v].n.Load()
		s.In[v] = c.in[v].n.Load()
	}
	return s
}

// Snapshot is a copy of Counters at one moment.
type Snapshot struct {
	Out, In [NumVerbs]uint64
}

// Sub returns s - o, counter by counter: the verbs between two snapshots.
func (s Snapshot) Sub(o Snapshot) Snapshot {
	for v := range s.Out {
		s.Out[v] -= o.Out[v]
		s.In[v] -= o.In[v]
	}
	return s
}

// Add returns s + o.
func (s Snapshot) Add(o Snapshot) Snapshot {
	for v := range s.Out {
		s.Out[v] += o.Out[v]
		s.In[v] += o.In[v]
	}
	return s
}

// OutAtomics is the number of outbound atomics of every kind.
func (s Snapshot) OutAtomics() uint64 {
	return s.Out[VerbCAS] + s.Out[VerbFAA] + s.Out[VerbMaskedCAS] + s.Out[VerbMaskedFAA]
}

// InAtomics is the number of inbound atomics of every kind.
func (s Snapshot) InAtomics() uint64 {
	return s.In[VerbCAS] + s.In[VerbFAA] + s.In[VerbMaskedCAS] + s.In[VerbMaskedFAA]
}

// Collector exports registered Counters to Prometheus as
// rdma_verbs_total{role, node, verb, direction}.
type Collector struct {
	mu      sync.Mutex
	sources map[*Counters]source
	desc    *prometheus.Desc
}

type source struct {
	role string
	node func() NodeID
}

// NewCollector returns an empty Collector.
func NewCollector() *Collector {
	return &Collector{
		sources: map[*Counters]source{},
		desc: prometheus.NewDesc("rdma_verbs_total",
			"Fabric verbs by node, kind and direction (out = initiated, in = received).",
			[]string{"role", "node", "verb", "direction"}, nil),
	}
}

// Add exports c under role; node is called at scrape time because a node's
// ID can change when it rejoins a restarted memory node.
func (col *Collector) Add(role string, node func() NodeID, c *Counters) {
	col.mu.Lock()
	col.sources[c] = source{role, node}
	col.mu.Unlock()
}

// Remove stops exporting c.
func (col *Collector) Remove(c *Counters) {
	col.mu.Lock()
	delete(col.sources, c)
	col.mu.Unlock()
}

func (col *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- col.desc }

func (col *Collector) Collect(ch chan<- prometheus.Metric) {
	col.mu.Lock()
	defer col.mu.Unlock()
	for c, src := range col.sources {
		s := c.Snapshot()
		node := strconv.Itoa(int(src.node()))
		for v := Verb(0); v < NumVerbs; v++ {
			if s.Out[v] != 0 {
				ch <- prometheus.MustNewConstMetric(col.desc, prometheus.CounterValue, float64(s.Out[v]), src.role, node, v.String(), "out")
			}
			if s.In[v] != 0 {
				ch <- prometheus.MustNewConstMetric(col.desc, prometheus.CounterValue, float64(s.In[v]), src.role, node, v.String(), "in")
			}
		}
	}
}
