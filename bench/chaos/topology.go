package chaos

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shiftlock/shiftlock-proxy/ha"
	"github.com/shiftlock/shiftlock-proxy/internal/freeport"
	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// topology is one memnode and n proxies on loopback. Every proxy reaches the
// memnode, and every other proxy reaches it, through a toxiproxy link that
// faults can poison: "mem-i" carries proxy i's verbs, "peer-i" carries the
// handovers other proxies send to proxy i.
//
// With HA, a three-member etcd holds the shard, and two memory nodes
// campaign for it. Each memory node is reached through one link, "memnode-j"
// (the address it advertises in etcd), and reaches each etcd member k
// through "etcd-j-k", so that a partition can isolate it from proxies and
// etcd alike. Proxies reach etcd directly.
type topology struct {
	cfg     Config
	memPort int
	mem     *testproc.Proc
	proxies []*proxyProc
	// embedded is a proxy on its embedded memory node, with clients and
	// keys of its own (nil without Config.Embedded clients).
	embedded *proxyProc
	links    map[string]*toxiproxy.Proxy
	tox      *toxiproxy.ApiServer
	mu       sync.Mutex

	etcd    *testproc.EtcdCluster
	etcdCli *clientv3.Client
	mems    []*memProc

	// launched is every process started, restarted ones included, in
	// order: a violation's cause is often in the words of a process that
	// was killed since.
	launched []*testproc.Proc
}

// memProc is one memory node of an HA topology.
type memProc struct {
	j        int
	port, tx int // real listener, and the toxiproxy port it advertises
	etcdTx   []int
	p        *testproc.Proc
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
		if !cfg.HA {
			if err := t.link(fmt.Sprintf("mem-%d", i), pp.memTx, t.memPort); err != nil {
				return nil, err
			}
		}
		if err := t.link(fmt.Sprintf("peer-%d", i), pp.peerTx, pp.peerPort); err != nil {
			return nil, err
		}
		t.proxies = append(t.proxies, pp)
	}
	if cfg.Embedded > 0 {
		e := &proxyProc{i: cfg.Proxies}
		if e.respPort, err = freeport.Pick(); err != nil {
			return nil, err
		}
		t.embedded = e
	}
	if cfg.HA {
		if err := t.newHA(); err != nil {
			t.stop()
			return nil, err
		}
	}
	return t, nil
}

// haMemnodes is the number of memory nodes campaigning for the shard.
const haMemnodes = 2

func (t *topology) newHA() error {
	etcd, err := testproc.NewEtcdCluster(t.cfg.EtcdBin, filepath.Join(t.cfg.WorkDir, "etcd"), 3)
	if err != nil {
		return err
	}
	t.etcd = etcd
	if t.etcdCli, err = ha.Dial(etcd.Endpoints(), nil); err != nil {
		return err
	}
	for j := 0; j < haMemnodes; j++ {
		mp := &memProc{j: j}
		for _, p := range []*int{&mp.port, &mp.tx} {
			if *p, err = freeport.Pick(); err != nil {
				return err
			}
		}
		if err := t.link(fmt.Sprintf("memnode-%d", j), mp.tx, mp.port); err != nil {
			return err
		}
		for k, ep := range etcd.Endpoints() {
			port, err := freeport.Pick()
			if err != nil {
				return err
			}
			_, up, _ := strings.Cut(ep, ":")
			upPort, _ := strconv.Atoi(up)
			if err := t.link(fmt.Sprintf("etcd-%d-%d", j, k), port, upPort); err != nil {
				return err
			}
			mp.etcdTx = append(mp.etcdTx, port)
		}
		t.mems = append(t.mems, mp)
	}
	return nil
}

var memnodeStandby = regexp.MustCompile(`memnode standby for shard \S+ at (\S+)`)

// startHAMemnode starts memory node j; ready tells whether to wait until it
// leads (testproc.MemnodeReady) or only until it stands by.
func (t *topology) startHAMemnode(mp *memProc, ready *regexp.Regexp) error {
	var eps []string
	for _, p := range mp.etcdTx {
		eps = append(eps, addr(p))
	}
	args := []string{"-listen", addr(mp.port), "-advertise", addr(mp.tx), "-metrics", "", "-log-level", t.cfg.logLevel(),
		"-dead-after", t.cfg.DeadAfter.String(), "-heartbeat", t.cfg.Heartbeat.String(),
		"-entries", "65536", "-etcd", strings.Join(eps, ",")}
	p, err := testproc.Launch(fmt.Sprintf("memnode-%d", mp.j), t.cfg.MemnodeBin, args, ready, 30*time.Second)
	if err != nil {
		return err
	}
	t.keep(p, &mp.p)
	return nil
}

// keep keeps p as the process at *at, and in the list of every process
// started.
func (t *topology) keep(p *testproc.Proc, at **testproc.Proc) {
	t.mu.Lock()
	*at = p
	t.launched = append(t.launched, p)
	t.mu.Unlock()
}

// record is the shard's record in etcd.
func (t *topology) record(ctx context.Context) (ha.Record, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rec, ok, err := ha.Read(rctx, t.etcdCli, "default")
	if err == nil && !ok {
		err = fmt.Errorf("no shard record in etcd")
	}
	return rec, err
}

// active is the memory node the shard's record names.
func (t *topology) active(ctx context.Context) (*memProc, ha.Record, error) {
	rec, err := t.record(ctx)
	if err != nil {
		return nil, rec, err
	}
	for _, mp := range t.mems {
		if addr(mp.tx) == rec.Active {
			return mp, rec, nil
		}
	}
	return nil, rec, fmt.Errorf("etcd names %s, no memory node of this campaign", rec.Active)
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
	t.keep(p, &t.mem)
	return nil
}

// drainTimeout is the proxies' drain_timeout: shorter than the keepers'
// holds, so that a stop-proxy or embedded-stop fault leaves locks held, as
// a deploy with a short grace period does.
const drainTimeout = 300 * time.Millisecond

func (t *topology) startProxy(pp *proxyProc) error {
	args := []string{"-listen", addr(pp.respPort), "-metrics", "", "-log-level", t.cfg.logLevel(),
		"-peer-listen", addr(pp.peerPort), "-advertise", addr(pp.peerTx),
		"-acquire-wait", t.cfg.Wait.String(), "-name", fmt.Sprintf("proxy-%d", pp.i), "-drain-timeout", drainTimeout.String()}
	if t.cfg.HA {
		args = append(args, "-etcd", strings.Join(t.etcd.Endpoints(), ","), "-shard", "default")
	} else {
		args = append(args, "-memnode", addr(pp.memTx))
	}
	args = append(args, t.cfg.ProxyArgs...)
	// A restarted memnode refuses joins during its grace; the proxy retries
	// for up to a minute before it gives up.
	p, err := testproc.Launch(fmt.Sprintf("proxy-%d", pp.i), t.cfg.ProxyBin, args, testproc.ProxyReady, 90*time.Second)
	if err != nil {
		return err
	}
	t.keep(p, &pp.p)
	return nil
}

// startEmbedded starts the embedded proxy on its state directory, which a
// restart keeps: the new process serves once the locks of the old one have
// run out.
func (t *topology) startEmbedded() error {
	e := t.embedded
	args := []string{"-listen", addr(e.respPort), "-metrics", "", "-log-level", t.cfg.logLevel(),
		"-acquire-wait", t.cfg.Wait.String(), "-name", "proxy-embedded", "-entries", "65536", "-drain-timeout", drainTimeout.String(),
		"-state-dir", filepath.Join(t.cfg.WorkDir, "embedded")}
	args = append(args, t.cfg.ProxyArgs...)
	p, err := testproc.Launch("proxy-embedded", t.cfg.ProxyBin, args, testproc.ProxyReady, 90*time.Second)
	if err != nil {
		return err
	}
	t.keep(p, &e.p)
	return nil
}

func (t *topology) start() error {
	if err := os.MkdirAll(t.cfg.WorkDir, 0o755); err != nil {
		return err
	}
	if t.cfg.HA {
		// The first leads; the other stands by.
		if err := t.startHAMemnode(t.mems[0], testproc.MemnodeReady); err != nil {
			return err
		}
		for _, mp := range t.mems[1:] {
			if err := t.startHAMemnode(mp, memnodeStandby); err != nil {
				return err
			}
		}
	} else if err := t.startMemnode(); err != nil {
		return err
	}
	for _, pp := range t.proxies {
		if err := t.startProxy(pp); err != nil {
			return err
		}
	}
	if t.embedded != nil {
		return t.startEmbedded()
	}
	return nil
}

func (t *topology) stop() {
	for _, pp := range t.proxies {
		if pp.p != nil {
			pp.p.Kill()
		}
	}
	if t.embedded != nil && t.embedded.p != nil {
		t.embedded.p.Kill()
	}
	if t.mem != nil {
		t.mem.Kill()
	}
	for _, mp := range t.mems {
		if mp.p != nil {
			mp.p.Kill()
		}
	}
	if t.etcdCli != nil {
		_ = t.etcdCli.Close()
	}
	if t.etcd != nil {
		t.etcd.Close()
	}
	for _, l := range t.links {
		l.Stop()
	}
}

// dumpLogs writes the tail of every running proxy's and memory node's
// output to w.
func (t *topology) dumpLogs(w io.Writer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ps []*testproc.Proc
	for _, mp := range t.mems {
		ps = append(ps, mp.p)
	}
	for _, pp := range t.proxies {
		ps = append(ps, pp.p)
	}
	if t.embedded != nil {
		ps = append(ps, t.embedded.p)
	}
	for _, p := range ps {
		if p == nil {
			continue
		}
		lines := strings.Split(p.Output(), "\n")
		fmt.Fprintf(w, "--- %s, last %d lines ---\n%s\n", p.Name, min(len(lines), 80), strings.Join(lines[max(0, len(lines)-80):], "\n"))
	}
}

// saveLogs writes the whole output of every process the campaign started,
// killed ones included, to dir, one file each (memnode-0.1.log is memory
// node 0's second life).
func (t *topology) saveLogs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	lives := map[string]int{}
	for _, p := range t.launched {
		name := fmt.Sprintf("%s.%d.log", p.Name, lives[p.Name])
		lives[p.Name]++
		if err := os.WriteFile(filepath.Join(dir, name), []byte(p.Output()+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// logLevel of the processes: warnings; CHAOS_LOG_LEVEL chooses another
// (info shows joins, takeovers and graces), and CHAOS_DEBUG means debug.
func (c Config) logLevel() string {
	if os.Getenv("CHAOS_DEBUG") != "" {
		return "debug"
	}
	if l := os.Getenv("CHAOS_LOG_LEVEL"); l != "" {
		return l
	}
	return "warn"
}
