package itest

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/ha"
	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/rdma"
)

var memnodeStandby = regexp.MustCompile(`memnode standby for shard \S+ at (\S+)`)

// haMemnode starts a memory node that campaigns for shard "default" through
// etcd; ready is MemnodeReady for the one expected to lead at once.
func haMemnode(t *testing.T, etcd *testproc.EtcdCluster, port int, ready *regexp.Regexp) *testproc.Proc {
	t.Helper()
	return testproc.Start(t, "memnode", testproc.Bin(t, "memnode"), []string{
		"-listen", fmt.Sprintf("127.0.0.1:%d", port), "-metrics", "", "-entries", "65536",
		"-etcd", strings.Join(etcd.Endpoints(), ","), "-dead-after", "1s",
	}, ready)
}

// haShard is shard "default" on a three-member etcd, with two memory nodes
// campaigning for it, each on a port of its own: a, which leads, and b,
// which stands by.
type haShard struct {
	etcd         *testproc.EtcdCluster
	portA, portB int
	a, b         *testproc.Proc
}

// startHAShard starts an haShard, and returns once a leads.
func startHAShard(t *testing.T) *haShard {
	t.Helper()
	s := &haShard{etcd: testproc.Etcd(t, 3), portA: testproc.FreePort(t), portB: testproc.FreePort(t)}
	s.a = haMemnode(t, s.etcd, s.portA, testproc.MemnodeReady)
	s.b = haMemnode(t, s.etcd, s.portB, memnodeStandby)
	return s
}

// proxies starts n proxies, named proxy-0 and on, that follow the shard's
// active memory node.
func (s *haShard) proxies(t *testing.T, n int) []*testproc.Proc {
	t.Helper()
	var ps []*testproc.Proc
	for i := 0; i < n; i++ {
		ps = append(ps, testproc.Proxy(t, "-etcd", strings.Join(s.etcd.Endpoints(), ","), "-shard", "default",
			"-peer-listen", "127.0.0.1:0", "-name", fmt.Sprintf("proxy-%d", i)))
	}
	return ps
}

// restartA starts memory node a again on its port, after it was killed: it
// comes back as a standby.
func (s *haShard) restartA(t *testing.T) {
	t.Helper()
	haMemnode(t, s.etcd, s.portA, memnodeStandby)
}

// TestFailover runs the whole path with real processes: a three-member
// etcd, two memory nodes (one active, one standing by) and two proxies,
// with redsync clients working throughout. The active memory node is killed
// (-9, not restarted); the standby takes over, the proxies follow it, and
// the clients carry on. Then the new active node is frozen (SIGSTOP, as a
// partition from etcd and proxies looks to everyone else), the restarted
// first node takes over, and the frozen one, woken, deposes itself: it never
// serves again, and fencing tokens only grow through both failovers.
func TestFailover(t *testing.T) {
	shard := startHAShard(t)
	a, b := shard.a, shard.b
	proxies := shard.proxies(t, 2)
	cli, err := ha.Dial(shard.etcd.Endpoints(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	// Workers: redsync over one proxy each, on four shared keys, checking
	// that no two hold a key at once and counting their successes.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var inside [4]atomic.Int32
	var locked atomic.Int64
	var overlaps atomic.Int64
	for w := 0; w < 8; w++ {
		rc := redis.NewClient(&redis.Options{Addr: proxies[w%2].Addr, PoolSize: 4, MaxRetries: -1})
		defer rc.Close()
		rs := redsync.New(goredis.NewPool(rc))
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				k := (w + i) % len(inside)
				m := rs.NewMutex(fmt.Sprintf("acct:%d", k), redsync.WithExpiry(2*time.Second), redsync.WithTries(4),
					redsync.WithRetryDelay(50*time.Millisecond))
				if err := m.LockContext(ctx); err != nil {
					continue // refused during a failover; ask again
				}
				if inside[k].Add(1) != 1 {
					overlaps.Add(1)
				}
				time.Sleep(5 * time.Millisecond)
				inside[k].Add(-1)
				locked.Add(1)
				_, _ = m.UnlockContext(context.Background())
			}
		}(w)
	}
	defer func() { stop(); wg.Wait() }()

	fencer := client(t, proxies[0].Addr)
	fence := func() uint64 {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			tok, err := fencer.Do(ctxT(t, 5*time.Second), "LOCK.ACQUIRE", "fence", "f", "PX", 1000, "WAIT", 500).Uint64()
			if err == nil {
				fencer.Do(ctxT(t, 5*time.Second), "LOCK.RELEASE", "fence", "f")
				return tok
			}
			if time.Now().After(deadline) {
				t.Fatalf("no fencing token for 30 s: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	progress := func(what string) {
		t.Helper()
		from := locked.Load()
		deadline := time.Now().Add(30 * time.Second)
		for locked.Load() < from+50 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: redsync clients made no progress for 30 s (%d locks in all)", what, locked.Load())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	record := func() ha.Record {
		t.Helper()
		rec, ok, err := ha.Read(ctxT(t, 5*time.Second), cli, "default")
		if err != nil || !ok {
			t.Fatalf("shard record: %+v %v %v", rec, ok, err)
		}
		return rec
	}
	// takeover waits for generation gen and returns its record.
	takeover := func(gen uint64) ha.Record {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if rec := record(); rec.Generation >= gen {
				return rec
			}
			if time.Now().After(deadline) {
				t.Fatalf("no generation %d after 30 s", gen)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	progress("before any failover")
	tok1, rec1 := fence(), record()
	gen1 := rec1.Generation

	// 1. kill -9 the active node; it is not restarted for the takeover.
	killed := time.Now()
	a.Kill()
	tok2 := fence()
	took := time.Since(killed)
	progress("after the active memory node was killed")
	rec2 := takeover(gen1 + 1)
	// The new table starts a leap above the old one's high-water mark.
	if rec2.Generation != gen1+1 || tok2 <= tok1 || tok2 <= rec1.RelHighWater+rdma.RecoveryLeap {
		t.Fatalf("after the kill: generation %d -> %d, fencing token %d -> %d (old high water %d)", gen1, rec2.Generation, tok1, tok2, rec1.RelHighWater)
	}
	t.Logf("failover after kill -9: first grant %v after the kill (generation %d)", took.Round(time.Millisecond), rec2.Generation)
	if !strings.Contains(b.Output(), "memnode active for shard default") {
		t.Fatalf("the standby did not take over:\n%s", b.Output())
	}

	// 2. the killed node comes back as a standby; freeze the active one.
	shard.restartA(t)
	rec2 = record()
	b.Signal(19) // SIGSTOP
	rec3 := takeover(rec2.Generation + 1)
	gen3 := rec3.Generation
	// SIGSTOP takes effect asynchronously: a grant can still slip through
	// the frozen node just after the signal. Tokens taken after the
	// takeover come from the new table, above everything before.
	tok3 := fence()
	progress("after the active memory node was frozen")
	if gen3 != rec2.Generation+1 || tok3 <= tok2 || tok3 <= rec2.RelHighWater+rdma.RecoveryLeap {
		t.Fatalf("after the freeze: generation %d -> %d, fencing token %d -> %d (old high water %d)", rec2.Generation, gen3, tok2, tok3, rec2.RelHighWater)
	}
	b.Signal(18) // SIGCONT: it must find itself deposed
	awaitOutput(t, b, "lost the shard; standing by again", 10*time.Second)
	progress("after the frozen node woke")
	if rec, _, _ := ha.Read(ctxT(t, 5*time.Second), cli, "default"); rec.Generation != gen3 || rec.Active != fmt.Sprintf("127.0.0.1:%d", shard.portA) {
		t.Fatalf("the woken node changed the record: %+v", rec)
	}
	if tok4 := fence(); tok4 <= tok3 {
		t.Fatalf("fencing token went back: %d after %d", tok4, tok3)
	}
	// The deposed node serves nothing: a standby holds no port.
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", shard.portB), time.Second); err == nil {
		c.Close()
		t.Fatal("the deposed memory node still accepts connections")
	}
	stop()
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("%d times two redsync clients held one key at once", n)
	}
	t.Logf("%d redsync locks in all; tokens %d, %d, %d", locked.Load(), tok1, tok2, tok3)
}
