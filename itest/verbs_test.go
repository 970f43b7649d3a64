package itest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// verbCounts is what a process's /metrics says about fabric verbs: rdma
// verbs by kind in one direction, and heartbeats (each one Write and one
// Read in one round trip).
type verbCounts struct {
	verbs map[string]float64
	beats float64
}

var verbLine = regexp.MustCompile(`^rdma_verbs_total\{.*direction="(in|out)".*verb="([a-z_]+)".*\} (\S+)$`)

func scrapeVerbs(t *testing.T, addr, direction string) verbCounts {
	t.Helper()
	vc := verbCounts{verbs: map[string]float64{}}
	for _, line := range scrapeMetrics(t, addr) {
		if m := verbLine.FindStringSubmatch(line); m != nil && m[1] == direction {
			v, _ := strconv.ParseFloat(m[3], 64)
			vc.verbs[m[2]] += v
		}
		if strings.HasPrefix(line, "proxy_heartbeats_total") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			vc.beats += v
		}
	}
	return vc
}

// sends is how many Sends (lock handovers to another proxy) the proxy
// whose /metrics is at addr posted.
func sends(t *testing.T, addr string) float64 {
	t.Helper()
	return scrapeVerbs(t, addr, "out").verbs["send"]
}

// quiet scrapes the proxy until no heartbeat is half-counted: every Write
// it ever posted is a heartbeat's, so the totals agree exactly between
// beats.
func quiet(t *testing.T, addr string) verbCounts {
	t.Helper()
	for end := time.Now().Add(testproc.Slow(10 * time.Second)); ; time.Sleep(time.Millisecond) {
		vc := scrapeVerbs(t, addr, "out")
		if vc.verbs["write"] == vc.beats {
			return vc
		}
		if time.Now().After(end) {
			t.Fatalf("writes %v never matched heartbeats %v: the proxy writes something else", vc.verbs["write"], vc.beats)
		}
	}
}

// cycleCost is what uncontended lock cycles cost on the fabric: the verbs
// by kind that a proxy sent, with the heartbeats among them counted apart,
// and the verbs its memory node received.
type cycleCost struct {
	sent     map[string]float64
	beats    float64
	received map[string]float64
}

// uncontendedCycles runs one uncontended lock cycle (lockCycle) through c,
// which pushes the lease horizon (a heartbeat), then n more, and returns
// what the n cost: the verbs the proxy whose /metrics is at proxyMetrics
// sent and, if memnodeMetrics is not "", the verbs the memory node
// received. It fails the test unless the proxy sent exactly one atomic for
// each acquire and each release, each in a round trip of its own, and
// nothing else but heartbeats (one Write and one Read each).
func uncontendedCycles(t *testing.T, c *redis.Client, n int, proxyMetrics, memnodeMetrics string) cycleCost {
	t.Helper()
	ctx := ctxT(t, testproc.Slow(2*time.Minute))
	cycle := func(i int) {
		t.Helper()
		if err := lockCycle(ctx, c, fmt.Sprintf("g1:%d", i), "tok", 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	received := func() map[string]float64 {
		if memnodeMetrics == "" {
			return nil
		}
		return scrapeVerbs(t, memnodeMetrics, "in").verbs
	}
	cycle(-1)
	inBefore := received()
	before := quiet(t, proxyMetrics)
	for i := 0; i < n; i++ {
		cycle(i)
	}
	after := quiet(t, proxyMetrics)
	inAfter := received()
	cost := cycleCost{sent: map[string]float64{}, beats: after.beats - before.beats}
	for v, x := range after.verbs {
		cost.sent[v] = x - before.verbs[v]
	}
	if inAfter != nil {
		cost.received = map[string]float64{}
		for v, x := range inAfter {
			cost.received[v] = x - inBefore[v]
		}
	}
	d, beats := cost.sent, cost.beats
	atomics := d["cas"] + d["faa"] + d["masked_cas"] + d["masked_faa"]
	if atomics != float64(2*n) || d["batch"] != float64(2*n)+beats || d["read"] != beats || d["write"] != beats || d["send"] != 0 || d["control"] != 0 {
		t.Fatalf("%d cycles cost %v with %v heartbeats; want %d atomics in %d round trips and nothing else", n, d, beats, 2*n, 2*n)
	}
	t.Logf("%d cycles: %v atomics (masked CAS %v, masked FAA %v) in %v round trips, plus %v heartbeats",
		n, atomics, d["masked_cas"], d["masked_faa"], d["batch"]-beats, beats)
	return cost
}

// TestUncontendedCycleIsOneAtomicEach is the paper's G1 on the proxy's own
// path: an uncontended SET NX PX followed by the compare-and-delete release
// costs the memory node exactly one atomic for the acquire and one for the
// release, and no other verb, measured with the fabric counters of the real
// proxy process, on the embedded memory node and on a memnode process.
// Heartbeats (one Write and one Read each) are counted apart.
func TestUncontendedCycleIsOneAtomicEach(t *testing.T) {
	for _, tc := range []struct {
		name    string
		memnode bool
	}{{"embedded", false}, {"memnode", true}} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"-metrics", "127.0.0.1:0"}
			mnMetrics := ""
			if tc.memnode {
				mn := testproc.Memnode(t, "-metrics", "127.0.0.1:0")
				mnMetrics = metricsAddr(t, mn)
				args = append(args, "-memnode", mn.Addr)
			}
			p := testproc.Proxy(t, args...)
			cost := uncontendedCycles(t, client(t, p.Addr), 500, metricsAddr(t, p), mnMetrics)
			if tc.memnode {
				// The memory node sees the same from its side: every
				// atomic it received was one of those.
				in, out := cost.received["masked_cas"]+cost.received["masked_faa"], cost.sent["masked_cas"]+cost.sent["masked_faa"]
				if in != out {
					t.Fatalf("memnode received %v, proxy sent %v", cost.received, cost.sent)
				}
			}
		})
	}
}

// TestRoutedQuorumCycleIsOneAtomicEach: RedLock through three proxies of
// one memory node process, with quorum routing, is one lock: a redsync
// Lock and Unlock over the three pools cost the memory node one atomic for
// the acquire and one for the release in all, as one proxy's cycle does
// (without routing: three each).
func TestRoutedQuorumCycleIsOneAtomicEach(t *testing.T) {
	_, ps := cluster(t, 3, "-quorum-routing", "-metrics", "127.0.0.1:0")
	var maddrs []string
	for _, p := range ps {
		maddrs = append(maddrs, metricsAddr(t, p))
	}
	// The proxies find each other by hellos, twice a second.
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		all := true
		for _, a := range maddrs {
			all = all && metricValue(t, a, "proxy_routers") == 3
		}
		if all {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the proxies did not see each other as routers")
		}
	}
	rs := redsync.New(pools(t, ps[0].Addr, ps[1].Addr, ps[2].Addr)...)
	ctx := ctxT(t, time.Minute)
	total := func() (atomics, forwarded float64) {
		for _, a := range maddrs {
			vc := scrapeVerbs(t, a, "out")
			atomics += vc.verbs["cas"] + vc.verbs["faa"] + vc.verbs["masked_cas"] + vc.verbs["masked_faa"]
			forwarded += metricValue(t, a, "proxy_routed_forwarded_total")
		}
		return
	}
	cycle := func(i int) {
		m := rs.NewMutex(fmt.Sprintf("q:%d", i), redsync.WithExpiry(10*time.Second), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			t.Fatalf("lock %d: %v", i, err)
		}
		if ok, err := m.UnlockContext(ctx); !ok || err != nil {
			t.Fatalf("unlock %d: %v %v", i, ok, err)
		}
	}
	// The first grants push the lease horizons (heartbeats, not atomics).
	// Its release may land after Unlock returns, as below: counted in the
	// cycles' atomics, it was one too many about one run in eight.
	before, _ := total()
	cycle(-1)
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if a, _ := total(); a-before >= 2 || time.Now().After(end) {
			break
		}
	}
	const n = 200
	a0, f0 := total()
	for i := 0; i < n; i++ {
		cycle(i)
	}
	// Releases of shares travel as messages; the lock's own release may
	// land just after Unlock returns.
	var a1, f1 float64
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if a1, f1 = total(); a1-a0 >= 2*n || time.Now().After(end) {
			break
		}
	}
	if a1-a0 != 2*n {
		t.Fatalf("%d RedLock cycles over three routed proxies cost %v atomics, want %d", n, a1-a0, 2*n)
	}
	if f1-f0 != 2*n {
		t.Fatalf("%d cycles forwarded %v acquires, want %d (two of every three requests)", n, f1-f0, 2*n)
	}
}
