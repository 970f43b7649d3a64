package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/shiftlock/shiftlock-proxy/internal/freeport"
	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// topology is one memnode and n proxies on loopback. Every proxy reaches the
// memnode, and every other proxy reaches it, through a toxiproxy link that
// faults can poison: "mem-i" carries proxy i's verbs, "peer-i" carries the
// handovers other proxies send to proxy i.
type topology struct {
	cfg     Config
	memPort int
	mem     *testproc.Proc
	proxies []*proxyProc
	links   map[string]*toxiproxy.Proxy
	tox     *toxiproxy.ApiServer
	mu      sync.Mutex
}

type proxyProc struct {
	i                int
	respPort         int
	peerPort, peerTx int // real peer listener, and the toxiproxy port advertised for it
	memTx            int // toxiproxy port in front of the memnode
	p                *testproc.Proc
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

func newTopology(cfg Config) (*topology, error) {
	t := &topology{cfg: cfg, links: map[string]*toxiproxy.Proxy{}}
	var err error
	if t.memPort, err = freeport.Pick(); err != nil {
		return nil, err
	}
	t.tox = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	for i := 0; i < cfg.Proxies; i++ {
		pp := &proxyProc{i: i}
		for _, p := range []*int{&pp.respPort, &pp.peerPort, &pp.peerTx, &pp.memTx} {
			if *p, err = freeport.Pick(); err != nil {
				return nil, err
			}
		}
		if err := t.link(fmt.Sprintf("mem-%d", i), pp.memTx, t.memPort); err != nil {
			return nil, err
		}
		if err := t.link(fmt.Sprintf("peer-%d", i), pp.peerTx, pp.peerPort); err != nil {
			return nil, err
		}
		t.proxies = append(t.proxies, pp)
	}
	return t, nil
}

func (t *topology) link(name string, listen, upstream int) error {
	p := toxiproxy.NewProxy(t.tox, name, addr(listen), addr(upstream))
	if err := p.Start(); err != nil {
		return fmt.Errorf("toxiproxy %s: %w", name, err)
	}
	t.links[name] = p
	return nil
}

func (t *topology) startMemnode() error {
	args := []string{"-listen", addr(t.memPort), "-metrics", "", "-log-level", t.cfg.logLevel(),
		"-dead-after", t.cfg.DeadAfter.String(), "-heartbeat", t.cfg.Heartbeat.String(),
		"-entries", "65536", "-state-dir", filepath.Join(t.cfg.WorkDir, "memnode")}
	p, err := testproc.Launch("memnode", t.cfg.MemnodeBin, args, testproc.MemnodeReady, 30*time.Second)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.mem = p
	t.mu.Unlock()
	return nil
}

func (t *topology) startProxy(pp *proxyProc) error {
	args := []string{"-listen", addr(pp.respPort), "-metrics", "", "-log-level", t.cfg.logLevel(),
		"-memnode", addr(pp.memTx), "-peer-listen", addr(pp.peerPort), "-advertise", addr(pp.peerTx),
		"-acquire-wait", t.cfg.Wait.String(), "-name", fmt.Sprintf("proxy-%d", pp.i)}
	args = append(args, t.cfg.ProxyArgs...)
	// A restarted memnode refuses joins during its grace; the proxy retries
	// for up to a minute before it gives up.
	p, err := testproc.Launch(fmt.Sprintf("proxy-%d", pp.i), t.cfg.ProxyBin, args, testproc.ProxyReady, 90*time.Second)
	if err != nil {
		return err
	}
	t.mu.Lock()
	pp.p = p
	t.mu.Unlock()
	return nil
}

func (t *topology) start() error {
	if err := os.MkdirAll(t.cfg.WorkDir, 0o755); err != nil {
		return err
	}
	if err := t.startMemnode(); err != nil {
		return err
	}
	for _, pp := range t.proxies {
		if err := t.startProxy(pp); err != nil {
			return err
		}
	}
	return nil
}

func (t *topology) stop() {
	for _, pp := range t.proxies {
		if pp.p != nil {
			pp.p.Kill()
		}
	}
	if t.mem != nil {
		t.mem.Kill()
	}
	for _, l := range t.links {
		l.Stop()
	}
}

// logLevel of the processes: warnings, or everything with CHAOS_DEBUG set.
func (c Config) logLevel() string {
	if os.Getenv("CHAOS_DEBUG") != "" {
		return "debug"
	}
	return "warn"
}
