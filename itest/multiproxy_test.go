package itest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
	"github.com/shiftlock/shiftlock-proxy/shiftlock/locktest"
)

// respLocker is a shiftlock.Locker that takes locks through a proxy with
// LOCK.ACQUIRE, so that the mutual-exclusion checker can drive proxies
// exactly as it drives the lock library.
type respLocker struct {
	c    *redis.Client
	keys int
	seq  atomic.Uint64
	name string
}

func (l *respLocker) Entries() uint64 { return uint64(l.keys) }

func (l *respLocker) Acquire(ctx context.Context, entry uint64, m shiftlock.Mode) (shiftlock.Grant, error) {
	key := fmt.Sprintf("mp:%d", entry)
	token := fmt.Sprintf("%s-%d", l.name, l.seq.Add(1))
	args := []any{"LOCK.ACQUIRE", key, token}
	if m == shiftlock.Shared {
		args = append(args, "SHARED")
	}
	// A wait budget below go-redis's 3 s read timeout: a longer wait would
	// end as a client-side i/o timeout instead of the nil the loop retries.
	args = append(args, "PX", 30000, "WAIT", 2000)
	for {
		fence, err := l.c.Do(ctx, args...).Int64()
		if err == redis.Nil {
			continue // budget spent under heavy contention: ask again
		}
		if err != nil {
			return nil, err
		}
		return &respGrant{l: l, key: key, token: token, fence: uint64(fence)}, nil
	}
}

type respGrant struct {
	l          *respLocker
	key, token string
	fence      uint64
}

func (g *respGrant) Token() uint64 { return g.fence }
func (g *respGrant) Release(ctx context.Context) error {
	n, err := g.l.c.Do(ctx, "LOCK.RELEASE", g.key, g.token).Int()
	if err == nil && n != 1 {
		err = fmt.Errorf("release of %s by %s: %d", g.key, g.token, n)
	}
	return err
}

// TestMultiProxyMutualExclusion: three proxy processes share one memnode
// process; clients on all three contend for the same few keys in shared and
// exclusive mode. The checker must stay clean, and handovers must cross
// proxies (each proxy's fabric counters show Sends to the others).
func TestMultiProxyMutualExclusion(t *testing.T) {
	mn := testproc.Memnode(t, "-entries", "65536")
	var lockers []shiftlock.Locker
	var metrics []string
	for i := 0; i < 3; i++ {
		p := testproc.Proxy(t, "-memnode", mn.Addr, "-metrics", "127.0.0.1:0")
		metrics = append(metrics, metricsAddr(t, p))
		lockers = append(lockers, &respLocker{c: client(t, p.Addr), keys: 4, name: fmt.Sprintf("p%d", i)})
	}
	chk := locktest.NewChecker(4)
	res, err := locktest.Run(ctxT(t, 3*time.Minute), locktest.Workload{
		Clients: lockers, Workers: 48, Entries: 4, ReadRatio: 0.3, Ops: 40, Seed: 7,
		Hold: 200 * time.Microsecond,
	}, chk)
	if err != nil {
		t.Fatal(err)
	}
	if chk.Violations() != 0 {
		t.Fatalf("%d violations: %v", chk.Violations(), chk.Report())
	}
	var total float64
	for i, m := range metrics {
		n := sends(t, m)
		t.Logf("proxy %d sent %v notifications to other proxies", i, n)
		if n == 0 {
			t.Errorf("proxy %d never handed over to another proxy", i)
		}
		total += n
	}
	t.Logf("%d lock operations through 3 proxies, %v cross-proxy sends", res.Ops, total)
}
