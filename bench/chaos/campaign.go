package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/keydist"
)

// Config is one campaign.
type Config struct {
	MemnodeBin, ProxyBin string
	// ProxyArgs are extra arguments for every proxy (e.g. -frontend).
	ProxyArgs []string
	WorkDir   string // state directory of the memnode, logs
	// LogDir, when set, receives every process's whole output if the
	// history has a violation (see topology.saveLogs).
	LogDir string

	Proxies int
	Clients int
	Keys    int
	Zipf    float64 // key skew
	Shared  float64 // fraction of shared acquires

	TTL  time.Duration // PX of every acquire
	Wait time.Duration // WAIT of every acquire
	Hold time.Duration // longest critical section (uniform in [0, Hold])
	// Keepers are extra clients that take exclusive locks with twice the
	// TTL and hold each for most of it (uniform in [TTL, 1.8 TTL]), on
	// uniformly chosen keys: critical sections that outlast the detection
	// of a failure, which only a correct grace period keeps apart from the
	// next holder's. Default 2; negative: none.
	Keepers int

	DeadAfter, Heartbeat time.Duration

	Duration   time.Duration
	FaultEvery time.Duration
	Kinds      []string // faults to inject, in rotation

	// HA runs the failover topology: a three-member etcd and two memory
	// nodes campaigning for one shard (see topology), with HAFaultKinds.
	HA      bool
	EtcdBin string

	// ConstKeys are keys ("const:k") that applications lock with one
	// constant value, "1", as `SET job 1 NX` scripts do: one such client
	// per key and proxy, so that the clients of a key differ only in the
	// proxy they use. Default 2; negative: none.
	ConstKeys int
	// Lapsers are clients that let their lock's TTL run out, then try to
	// extend it and release it with their token: both must fail. Default
	// 2; negative: none.
	Lapsers int
	// Embedded clients use a proxy of their own on its embedded memory
	// node, on keys of their own ("emb:k"), with one keeper; the
	// embedded-restart fault kills it with -9 and starts it again on its
	// state directory, embedded-stop stops it with SIGTERM (a drain that
	// gives up, drainTimeout) and starts it again. Default 8; negative: no
	// embedded proxy.
	Embedded int

	// RangeClients lock spans of RangeNames range-lock names ("range:k")
	// through the proxies (rangeclients.go), with a range keeper among them
	// when there are keepers; the embedded proxy gets two of its own on
	// names of its own ("erange:k"). Defaults 6 and 3; negative: none.
	RangeClients, RangeNames int

	// Plant makes one client record a critical section it never locked, to
	// show that the checker catches a double grant.
	Plant bool

	Seed uint64
	Log  io.Writer
}

// FaultKinds are the faults a campaign knows.
var FaultKinds = []string{
	"kill-proxy", "memnode-restart", "pause-proxy",
	"mem-latency", "mem-timeout", "mem-reset", "mem-partition",
	"peer-latency", "peer-partition", "embedded-restart",
	"stop-proxy", "embedded-stop",
}

// HAFaultKinds are the faults of an HA campaign. The memory-node link faults
// act on the active memory node's one link, so they reach every proxy. The
// clean stops are left to the other campaign: a proxy leaves an HA memory
// node as it leaves any other, and CI runs both campaigns with every kind.
var HAFaultKinds = []string{
	"kill-proxy", "memnode-kill", "pause-proxy", "etcd-kill",
	"mem-latency", "memnode-partition", "mem-timeout", "mem-reset",
	"peer-latency", "peer-partition", "embedded-restart",
}

// Result is what a campaign saw.
type Result struct {
	Ops           int // acquire requests
	Granted, Busy int
	// RangeOps and RangeGranted count the range-lock acquires among them.
	RangeOps, RangeGranted int
	Errors                 int            // refused with an error (proxy restarting, TRYAGAIN, timeouts during faults)
	Stuck                  int            // requests that outlived the documented bound while their proxy was healthy
	Faults                 map[string]int // injected, by kind
	Violations             []Violation
	// Lapsed counts extends and releases of a lock past its TTL that the
	// proxy answered as done (each one a broken guarantee).
	Lapsed        int
	Recoveries    []time.Duration // kill -9 of a proxy holding locks -> first grant of each of its keys elsewhere
	RecoveryBound time.Duration
	RequestBound  time.Duration
	Elapsed       time.Duration
	MaxAnswer     time.Duration // slowest answered request to a healthy proxy
	ErrorKinds    map[string]int

	// HA only.
	Failovers     []time.Duration // memnode-kill or -partition -> first grant by the successor
	FailoverBound time.Duration
	Takeovers     int // generations started during the campaign, planned or not
}

func (c *Config) defaults() {
	if c.Proxies == 0 {
		c.Proxies = 3
	}
	if c.Clients == 0 {
		c.Clients = 48
	}
	if c.Keys == 0 {
		c.Keys = 16
	}
	if c.Zipf == 0 {
		c.Zipf = 0.9
	}
	if c.TTL == 0 {
		c.TTL = 1500 * time.Millisecond
	}
	if c.Wait == 0 {
		c.Wait = time.Second
	}
	if c.Hold == 0 {
		c.Hold = 10 * time.Millisecond
	}
	if c.Keepers == 0 {
		c.Keepers = 2
	}
	if c.ConstKeys == 0 {
		c.ConstKeys = 2
	}
	if c.Lapsers == 0 {
		c.Lapsers = 2
	}
	if c.Embedded == 0 {
		c.Embedded = 8
	}
	if c.RangeClients == 0 {
		c.RangeClients = 6
	}
	if c.RangeNames <= 0 {
		c.RangeNames = 3
	}
	if c.DeadAfter == 0 {
		c.DeadAfter = time.Second
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 100 * time.Millisecond
	}
	if c.FaultEvery == 0 {
		c.FaultEvery = 8 * time.Second
	}
	if len(c.Kinds) == 0 {
		c.Kinds = FaultKinds
		if c.HA {
			c.Kinds = HAFaultKinds
		}
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// Bounds documented in docs/reliability.md. A proxy's lease horizon is the
// longest TTL it grants plus a quarter of dead_after (lockmap.Lease), so a
// dead proxy's locks are free within dead_after + horizon, plus detection
// and recovery round trips (the 1 s allowance). A request ends within its
// WAIT plus the client's own read timeout slack.
func (c Config) recoveryBound() time.Duration {
	return c.DeadAfter + c.horizon() + time.Second
}

// horizon is a proxy's lease horizon: its longest TTL plus a quarter of
// dead_after (and at least dead_after).
func (c Config) horizon() time.Duration {
	return maxDur(c.keeperTTL(), c.DeadAfter) + c.DeadAfter/4
}

// keeperTTL is the keepers' TTL, the longest any client asks for.
func (c Config) keeperTTL() time.Duration {
	if c.Keepers > 0 {
		return 2 * c.TTL
	}
	return c.TTL
}

func (c Config) requestBound() time.Duration { return c.Wait + 2*time.Second }

// failoverBound is issue 13's bound on a memory node failover, from the
// fault to the first grant by the successor: the lease horizon it must wait
// out, plus dead_after, plus 2 s for etcd to expire the old lease and for
// proxies to rejoin.
func (c Config) failoverBound() time.Duration {
	return c.horizon() + c.DeadAfter + 2*time.Second
}

func maxDur(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}

// campaign is the shared state of a run.
type campaign struct {
	cfg  Config
	topo *topology

	mu      sync.Mutex
	history []Op
	faulty  []faultWindow // when each proxy was being faulted
	kills   []killEvent
	fails   []failoverEvent
	etcdN   int // the next etcd member to kill

	ops, granted, busy, errs, stuck atomic.Int64
	lapsed                          atomic.Int64
	rangeOps, rangeGranted          atomic.Int64
	maxAnswer                       atomic.Int64
	faults                          map[string]int
	errKinds                        map[string]int
}

type faultWindow struct {
	proxy      int // -1: every proxy (memnode faults)
	start, end time.Time
}

type killEvent struct {
	proxy int
	at    time.Time
	keys  []string // keys its clients held when it died
}

// failoverEvent is a fault that deposed the active memory node. Tokens above
// above are the successor's: its table starts a recovery leap above the
// high-water mark the deposed generation had saved.
type failoverEvent struct {
	at    time.Time
	above uint64
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// Run runs a campaign and checks its history.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	// Proxies are killed on purpose; the client library's dial errors are
	// counted, not logged.
	redis.SetLogger(quiet{})
	topo, err := newTopology(cfg)
	if err != nil {
		return Result{}, err
	}
	defer topo.stop()
	if err := topo.start(); err != nil {
		return Result{}, err
	}
	c := &campaign{cfg: cfg, topo: topo, faults: map[string]int{}, errKinds: map[string]int{}}
	var firstGen uint64
	if cfg.HA {
		rec, err := topo.record(ctx)
		if err != nil {
			return Result{}, err
		}
		firstGen = rec.Generation
	}
	start := time.Now()
	end := start.Add(cfg.Duration)
	runCtx, cancel := context.WithDeadline(ctx, end)
	defer cancel()

	var wg sync.WaitGroup
	pool := func(pp *proxyProc, size int) *redis.Client {
		return redis.NewClient(&redis.Options{
			Addr: addr(pp.respPort), PoolSize: size,
			ReadTimeout: cfg.requestBound() - 500*time.Millisecond, DialTimeout: time.Second,
			MaxRetries: -1, // a retried acquire could be granted twice
		})
	}
	clients := make([]*redis.Client, cfg.Proxies)
	for i, pp := range topo.proxies {
		clients[i] = pool(pp, cfg.Clients/cfg.Proxies+max(cfg.ConstKeys, 0)+max(cfg.Lapsers, 0)+max(cfg.RangeClients, 0)/cfg.Proxies+6)
		defer clients[i].Close()
	}
	zipf := keydist.NewZipf(uint64(cfg.Keys), cfg.Zipf)
	held := make([]atomic.Int64, cfg.Proxies+1) // locks currently held through each proxy, the embedded one last
	var heldKeys sync.Map                       // "proxy/key" -> count
	for w := 0; w < cfg.Clients+max(cfg.Keepers, 0); w++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			l := lane{rc: clients[id%cfg.Proxies], proxy: id % cfg.Proxies, prefix: "chaos:", keys: cfg.Keys, keeper: id >= cfg.Clients}
			c.client(runCtx, id, l, zipf, &held[id%cfg.Proxies], &heldKeys)
		}(w)
	}
	for k := 0; k < cfg.ConstKeys; k++ {
		for i := range cfg.Proxies {
			wg.Add(1)
			go func() { defer wg.Done(); c.constClient(runCtx, k, i, clients[i]) }()
		}
	}
	for w := 0; w < cfg.Lapsers; w++ {
		wg.Add(1)
		go func() { defer wg.Done(); c.lapser(runCtx, w, clients[w%cfg.Proxies], w%cfg.Proxies) }()
	}
	for w := 0; w < cfg.RangeClients+min(max(cfg.Keepers, 0), 1); w++ {
		if cfg.RangeClients <= 0 {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lane{rc: clients[w%cfg.Proxies], proxy: w % cfg.Proxies, prefix: "range:", keeper: w >= cfg.RangeClients}
			c.rangeClient(runCtx, w, l, cfg.RangeNames)
		}()
	}
	if e := topo.embedded; e != nil {
		ec := pool(e, cfg.Embedded+8)
		defer ec.Close()
		ekeys := max(cfg.Keys/2, 2)
		ezipf := keydist.NewZipf(uint64(ekeys), cfg.Zipf)
		for w := 0; w < cfg.Embedded+1; w++ {
			wg.Add(1)
			go func(id int) {
				defer wg.Done()
				l := lane{rc: ec, proxy: cfg.Proxies, prefix: "emb:", keys: ekeys, keeper: id == cfg.Embedded}
				c.client(runCtx, 10000+id, l, ezipf, &held[cfg.Proxies], &heldKeys)
			}(w)
		}
		for w := 0; cfg.RangeClients > 0 && w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := lane{rc: ec, proxy: cfg.Proxies, prefix: "erange:"}
				c.rangeClient(runCtx, 100+w, l, 2)
			}()
		}
	}
	if cfg.Plant {
		wg.Add(1)
		go func() { defer wg.Done(); c.rogue(runCtx) }()
	}
	c.injectFaults(runCtx, held, &heldKeys)
	wg.Wait()
	elapsed := time.Since(start)

	// Let in-flight recoveries finish before measuring them.
	c.mu.Lock()
	hist := append([]Op(nil), c.history...)
	kills := append([]killEvent(nil), c.kills...)
	fails := append([]failoverEvent(nil), c.fails...)
	c.mu.Unlock()
	res := Result{
		Ops: int(c.ops.Load()), Granted: int(c.granted.Load()), Busy: int(c.busy.Load()),
		RangeOps: int(c.rangeOps.Load()), RangeGranted: int(c.rangeGranted.Load()),
		Errors: int(c.errs.Load()), Stuck: int(c.stuck.Load()), Faults: c.faults,
		Violations: Check(hist), Lapsed: int(c.lapsed.Load()), RecoveryBound: cfg.recoveryBound(), RequestBound: cfg.requestBound(),
		Elapsed: elapsed, MaxAnswer: time.Duration(c.maxAnswer.Load()), ErrorKinds: c.errKinds,
	}
	res.Recoveries = recoveries(hist, kills)
	if (len(res.Violations) > 0 || res.Lapsed > 0) && !cfg.Plant {
		topo.dumpLogs(cfg.Log)
		if cfg.LogDir != "" {
			if err := topo.saveLogs(cfg.LogDir); err != nil {
				fmt.Fprintf(cfg.Log, "saving the logs: %v\n", err)
			}
		}
	}
	if cfg.HA {
		res.Failovers, res.FailoverBound = failovers(hist, fails), cfg.failoverBound()
		if n := len(res.Failovers); n > 0 && res.Failovers[n-1] > res.FailoverBound {
			// Rare, and only visible in the processes' own words: keep
			// them with the report.
			topo.dumpLogs(cfg.Log)
		}
		if rec, err := topo.record(context.Background()); err == nil {
			res.Takeovers = int(rec.Generation - firstGen)
		}
	}
	return res, nil
}

// lane is where a client asks: a proxy's connection pool, the proxy's
// index (the embedded proxy's is Config.Proxies), and its keys' prefix.
type lane struct {
	rc     *redis.Client
	proxy  int
	prefix string
	keys   int
	keeper bool
}

// client loops: acquire (shared or exclusive), hold, release, recording
// what it believed.
func (c *campaign) client(ctx context.Context, id int, l lane, zipf *keydist.Zipf, held *atomic.Int64, heldKeys *sync.Map) {
	r := rand.New(rand.NewPCG(c.cfg.Seed, uint64(id)))
	rc, proxy, keeper := l.rc, l.proxy, l.keeper
	name := fmt.Sprintf("c%d@p%d", id, proxy)
	ttl := c.cfg.TTL
	if keeper {
		name, ttl = "keeper"+name[1:], c.cfg.keeperTTL()
	}
	for seq := 0; ctx.Err() == nil; seq++ {
		key := l.prefix + strconv.FormatUint(zipf.Next(r), 10)
		shared := r.Float64() < c.cfg.Shared
		if keeper {
			key, shared = l.prefix+strconv.Itoa(r.IntN(l.keys)), false
		}
		token := fmt.Sprintf("%s-%d", name, seq)
		args := []any{"LOCK.ACQUIRE", key, token}
		if shared {
			args = append(args, "SHARED")
		}
		args = append(args, "PX", ttl.Milliseconds(), "WAIT", c.cfg.Wait.Milliseconds())
		sent := time.Now()
		c.ops.Add(1)
		fence, err := rc.Do(context.Background(), args...).Uint64()
		if !c.answered(ctx, proxy, name, key, sent, err) {
			continue
		}
		granted := time.Now()
		hk := strconv.Itoa(proxy) + "/" + key
		held.Add(1)
		n, _ := heldKeys.LoadOrStore(hk, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		hold := time.Duration(r.Int64N(int64(c.cfg.Hold) + 1))
		if keeper {
			hold = c.cfg.TTL + time.Duration(r.Int64N(int64(c.cfg.TTL*4/5)+1))
		}
		sleep(ctx, hold)
		released := time.Now()
		n.(*atomic.Int64).Add(-1)
		held.Add(-1)
		c.record(Op{Client: name, Key: key, Shared: shared, Fence: fence, Sent: sent, Granted: granted, Released: released, TTL: ttl})
		rctx, cancel := context.WithTimeout(context.Background(), c.cfg.requestBound())
		rc.Do(rctx, "LOCK.RELEASE", key, token)
		cancel()
	}
}

// answered counts an acquire's answer, sent at sent, and reports whether it
// was a grant. After an error it pauses a little, and it counts a request
// that a proxy not under a fault took longer than the bound to answer.
func (c *campaign) answered(ctx context.Context, proxy int, name, key string, sent time.Time, err error) bool {
	took := time.Since(sent)
	switch {
	case errors.Is(err, redis.Nil):
		c.busy.Add(1)
		c.noteAnswer(proxy, sent, took)
		return false
	case err != nil:
		c.errs.Add(1)
		c.noteError(err)
		if took > c.cfg.requestBound() && !c.faulted(proxy, sent, time.Now()) {
			c.stuck.Add(1)
			fmt.Fprintf(c.cfg.Log, "stuck: %s %s took %v: %v\n", name, key, took, err)
		}
		sleep(ctx, 50*time.Millisecond)
		return false
	}
	c.granted.Add(1)
	c.noteAnswer(proxy, sent, took)
	return true
}

// rogue records critical sections without taking the lock, of a key and of
// spans: the planted double grants the checker must find.
func (c *campaign) rogue(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		start := time.Now()
		sleep(ctx, 5*time.Millisecond)
		c.record(Op{Client: "rogue", Key: "chaos:0", Fence: 1, Sent: start, Granted: start, Released: time.Now(), TTL: c.cfg.TTL})
		if c.cfg.RangeClients > 0 {
			// And a span of every range-lock name's space, for as long.
			for k := 0; k < c.cfg.RangeNames; k++ {
				c.record(Op{Client: "rogue", Key: "range:" + strconv.Itoa(k), Span: true, L: 0, R: rangeSpace, Fence: 1,
					Sent: start, Granted: start, Released: time.Now(), TTL: c.cfg.TTL})
			}
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// noteError counts errors by their first words, for the report.
func (c *campaign) noteError(err error) {
	msg := err.Error()
	if i := strings.IndexAny(msg, ":("); i > 0 {
		msg = msg[:i]
	}
	if len(msg) > 60 {
		msg = msg[:60]
	}
	c.mu.Lock()
	c.errKinds[msg]++
	c.mu.Unlock()
}

func (c *campaign) record(o Op) {
	c.mu.Lock()
	c.history = append(c.history, o)
	c.mu.Unlock()
}

// noteAnswer keeps the slowest answer from a proxy that was not faulted.
func (c *campaign) noteAnswer(proxy int, sent time.Time, took time.Duration) {
	if c.faulted(proxy, sent, sent.Add(took)) {
		return
	}
	for {
		cur := c.maxAnswer.Load()
		if int64(took) <= cur || c.maxAnswer.CompareAndSwap(cur, int64(took)) {
			break
		}
	}
	if took > c.cfg.requestBound() {
		c.stuck.Add(1)
	}
}

// faulted reports whether proxy was under a fault at some point in [from, to],
// or shortly after one (it may still be rejoining).
func (c *campaign) faulted(proxy int, from, to time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	settle := c.cfg.recoveryBound() + 3*time.Second
	for _, w := range c.faulty {
		if (w.proxy == proxy || w.proxy == -1) && !from.After(w.end.Add(settle)) && !to.Before(w.start) {
			return true
		}
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// recoveries measures, for every proxy killed while holding locks, how long
// until each of its keys was granted again through another proxy.
func recoveries(hist []Op, kills []killEvent) []time.Duration {
	var out []time.Duration
	sort.Slice(hist, func(i, j int) bool { return hist[i].Granted.Before(hist[j].Granted) })
	for _, k := range kills {
		victim := "@p" + strconv.Itoa(k.proxy)
		for _, key := range k.keys {
			for _, o := range hist {
				if o.Key == key && o.Granted.After(k.at) && !hasSuffix(o.Client, victim) {
					out = append(out, o.Granted.Sub(k.at))
					break
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// failovers measures, for every fault that deposed the active memory node,
// how long until the first grant from its successor's table.
func failovers(hist []Op, fails []failoverEvent) []time.Duration {
	var out []time.Duration
	for _, f := range fails {
		var first time.Duration = -1
		for _, o := range hist {
			if o.Fence > f.above && o.Granted.After(f.at) {
				if d := o.Granted.Sub(f.at); first < 0 || d < first {
					first = d
				}
			}
		}
		if first >= 0 {
			out = append(out, first)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func hasSuffix(s, suf string) bool { return len(s) >= len(suf) && s[len(s)-len(suf):] == suf }
