package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/procutil"
)

// release is the compare-and-delete of the Redis documentation, the script
// hand-rolled clients use; the proxy recognises it by its normalised body.
var release = redis.NewScript(`if redis.call("get",KEYS[1]) == ARGV[1] then
    return redis.call("del",KEYS[1])
else
    return 0
end`)

func newClient(addr string, pool int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: pool, MinIdleConns: pool})
}

// cpuCost is CPU time (user + system, from /proc) per operation over a
// workload's measured window: of the server process, and of proxybench
// itself, which runs the clients. Zero if /proc could not tell.
type cpuCost struct{ server, gen time.Duration }

// cpuMark is the CPU both processes have used so far.
type cpuMark struct {
	server, gen time.Duration
	err         error
}

func markCPU(server *proc) cpuMark {
	s, err := procutil.ProcCPU(server.cmd.Process.Pid)
	return cpuMark{server: s, gen: procutil.SelfCPU(), err: err}
}

// costSince divides what both processes used since start by ops.
func (m cpuMark) costSince(start cpuMark, ops int64) cpuCost {
	if m.err != nil || start.err != nil || ops <= 0 {
		return cpuCost{}
	}
	return cpuCost{server: (m.server - start.server) / time.Duration(ops), gen: (m.gen - start.gen) / time.Duration(ops)}
}

// closeWindow takes the closing CPU mark and the count of operations at
// end, the end of a measured window, while the clients' last operations,
// which are not counted, finish (a redsync Lock can retry for seconds).
// Its result is ready once end has passed.
func closeWindow(server *proc, start cpuMark, end time.Time, ops func() int64) func() (int64, cpuCost) {
	done := make(chan struct{})
	var n int64
	var c cpuCost
	time.AfterFunc(time.Until(end), func() {
		m := markCPU(server)
		n = ops()
		c = m.costSince(start, n)
		close(done)
	})
	return func() (int64, cpuCost) { <-done; return n, c }
}

type latencyResult struct {
	p50, p99 time.Duration
	cpu      cpuCost // per acquire-release pair
}

// latency times SET NX PX plus the release script, one client, no contention.
func latency(ctx context.Context, server *proc, n int) (latencyResult, error) {
	addr := server.addr
	c := newClient(addr, 1)
	defer c.Close()
	h := hdrhistogram.New(1, int64(time.Second/time.Microsecond*10), 3)
	var start cpuMark
	for i := 0; i < n+n/10; i++ {
		if i == n/10 { // the first tenth warms up connections and caches
			start = markCPU(server)
		}
		key := fmt.Sprintf("lat:%d", i%64)
		t0 := time.Now()
		ok, err := c.SetNX(ctx, key, "tok", 10*time.Second).Result()
		if err != nil || !ok {
			return latencyResult{}, fmt.Errorf("latency SET NX on %s: %v %v", addr, ok, err)
		}
		if n, err := release.Run(ctx, c, []string{key}, "tok").Int(); err != nil || n != 1 {
			return latencyResult{}, fmt.Errorf("latency release on %s: %v %v", addr, n, err)
		}
		if i >= n/10 {
			_ = h.RecordValue(time.Since(t0).Microseconds())
		}
	}
	return latencyResult{
		p50: time.Duration(h.ValueAtQuantile(50)) * time.Microsecond,
		p99: time.Duration(h.ValueAtQuantile(99)) * time.Microsecond,
		cpu: markCPU(server).costSince(start, h.TotalCount()),
	}, nil
}

type tputResult struct {
	rate float64 // acquire-release cycles per second
	cpu  cpuCost // per cycle
}

// throughput runs clients on distinct keys and counts acquire-release
// cycles, and what they cost in CPU.
func throughput(ctx context.Context, server *proc, clients int, d time.Duration) (tputResult, error) {
	c := newClient(server.addr, clients)
	defer c.Close()
	var done atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	end := time.Now().Add(d)
	result := closeWindow(server, markCPU(server), end, done.Load)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			key := fmt.Sprintf("tput:%d", id)
			for time.Now().Before(end) {
				if ok, err := c.SetNX(ctx, key, "tok", 10*time.Second).Result(); err != nil || !ok {
					errc <- fmt.Errorf("throughput SET NX: %v %v", ok, err)
					return
				}
				if _, err := release.Run(ctx, c, []string{key}, "tok").Result(); err != nil {
					errc <- err
					return
				}
				done.Add(1)
			}
		}(i)
	}
	wg.Wait()
	n, cpu := result()
	close(errc)
	for err := range errc {
		return tputResult{}, err
	}
	return tputResult{rate: float64(n) / d.Seconds(), cpu: cpu}, nil
}

type hotResult struct {
	rate          float64 // acquisitions per second
	p50, p99, max time.Duration
	failures      int64
	perClient     []int         // acquisitions per client, sorted
	gap           time.Duration // median time from a holder's Unlock to the next holder's Lock returning
	held          time.Duration // median real duration of the hold (the sleep overshoots)
	cpu           cpuCost       // per acquisition
}

// hotKey has every client loop on one key with a default redsync mutex:
// Lock, hold, Unlock. Time to acquire includes redsync's own retries.
func hotKey(ctx context.Context, server *proc, clients int, d, hold time.Duration) (hotResult, error) {
	c := newClient(server.addr, clients+4)
	defer c.Close()
	rs := redsync.New(goredis.NewPool(c))
	h := hdrhistogram.New(1, int64(60*time.Second/time.Microsecond), 3)
	var mu sync.Mutex
	per := make([]int, clients)
	var failures, acquired atomic.Int64
	var wg sync.WaitGroup
	// The critical path of a handover: Unlock called by one client until
	// Lock returns to the next. The hold is the rest of a cycle.
	var unlocked atomic.Int64
	gaps := hdrhistogram.New(1, int64(60*time.Second/time.Microsecond), 3)
	holds := hdrhistogram.New(1, int64(60*time.Second/time.Microsecond), 3)
	end := time.Now().Add(d)
	result := closeWindow(server, markCPU(server), end, acquired.Load)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			for time.Now().Before(end) {
				m := rs.NewMutex("hot")
				start := time.Now()
				if err := m.LockContext(ctx); err != nil {
					failures.Add(1)
					continue
				}
				now := time.Now()
				took := now.Sub(start)
				if u := unlocked.Swap(0); u != 0 {
					mu.Lock()
					_ = gaps.RecordValue(now.Sub(time.Unix(0, u)).Microseconds())
					mu.Unlock()
				}
				if now.After(end) {
					m.UnlockContext(ctx) // past the window: not counted
					return
				}
				mu.Lock()
				_ = h.RecordValue(took.Microseconds())
				per[id]++
				mu.Unlock()
				acquired.Add(1)
				time.Sleep(hold)
				u := time.Now()
				unlocked.Store(u.UnixNano())
				mu.Lock()
				_ = holds.RecordValue(u.Sub(now).Microseconds())
				mu.Unlock()
				m.UnlockContext(ctx)
			}
		}(i)
	}
	wg.Wait()
	_, cpu := result()
	sort.Ints(per)
	return hotResult{
		rate:      float64(h.TotalCount()) / d.Seconds(),
		p50:       time.Duration(h.ValueAtQuantile(50)) * time.Microsecond,
		p99:       time.Duration(h.ValueAtQuantile(99)) * time.Microsecond,
		max:       time.Duration(h.Max()) * time.Microsecond,
		failures:  failures.Load(),
		perClient: per,
		gap:       time.Duration(gaps.ValueAtQuantile(50)) * time.Microsecond,
		held:      time.Duration(holds.ValueAtQuantile(50)) * time.Microsecond,
		cpu:       cpu,
	}, nil
}
