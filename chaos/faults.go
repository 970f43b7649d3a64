package chaos

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// injectFaults runs one fault every FaultEvery, rotating through the kinds,
// until the campaign ends. Faults never overlap, so each one's effect can be
// told apart.
func (c *campaign) injectFaults(ctx context.Context, held []atomic.Int64, heldKeys *sync.Map) {
	sleep(ctx, c.cfg.FaultEvery/2) // let the workload settle first
	for i := 0; ctx.Err() == nil; i++ {
		kind := c.cfg.Kinds[i%len(c.cfg.Kinds)]
		target := i % c.cfg.Proxies
		if kind == "kill-proxy" || kind == "pause-proxy" {
			target = busiest(held)
		}
		start := time.Now()
		err := c.inject(ctx, kind, target, heldKeys)
		end := time.Now()
		proxy := target
		if kind == "memnode-restart" {
			proxy = -1
		}
		c.mu.Lock()
		c.faulty = append(c.faulty, faultWindow{proxy: proxy, start: start, end: end})
		if err == nil {
			c.faults[kind]++
		}
		c.mu.Unlock()
		if err != nil {
			fmt.Fprintf(c.cfg.Log, "fault %s on proxy %d failed: %v\n", kind, target, err)
		} else {
			fmt.Fprintf(c.cfg.Log, "%s fault %-15s proxy %d, %v\n", start.Format("15:04:05"), kind, target, end.Sub(start).Round(time.Millisecond))
		}
		sleep(ctx, c.cfg.FaultEvery-time.Since(start))
	}
}

func busiest(held []atomic.Int64) int {
	best := 0
	for i := range held {
		if held[i].Load() > held[best].Load() {
			best = i
		}
	}
	return best
}

func (c *campaign) inject(ctx context.Context, kind string, target int, heldKeys *sync.Map) error {
	t := c.topo
	pp := t.proxies[target]
	switch kind {
	case "kill-proxy":
		var keys []string
		heldKeys.Range(func(k, v any) bool {
			if n := v.(*atomicInt).Load(); n > 0 && strings.HasPrefix(k.(string), strconv.Itoa(target)+"/") {
				keys = append(keys, strings.TrimPrefix(k.(string), strconv.Itoa(target)+"/"))
			}
			return true
		})
		pp.p.Kill()
		c.mu.Lock()
		c.kills = append(c.kills, killEvent{proxy: target, at: time.Now(), keys: keys})
		c.mu.Unlock()
		sleep(ctx, 2*time.Second)
		return t.startProxy(pp)
	case "memnode-restart":
		t.mem.Kill()
		sleep(ctx, time.Second)
		return t.startMemnode()
	case "pause-proxy":
		// Longer than dead_after: the memnode fences it, its locks are
		// recovered after its horizon, and on waking it must rejoin while its
		// clients still believe they hold what they held.
		pp.p.Signal(syscall.SIGSTOP)
		sleep(ctx, c.cfg.DeadAfter+c.cfg.DeadAfter*3/2)
		pp.p.Signal(syscall.SIGCONT)
		return nil
	case "mem-latency", "peer-latency":
		return c.toxic(ctx, kind, target, `{"name":"lat","type":"latency","stream":"downstream","attributes":{"latency":60,"jitter":40}}`, 3*time.Second)
	case "mem-timeout":
		// Data stops flowing; connections close after 1.5 s.
		return c.toxic(ctx, kind, target, `{"name":"to","type":"timeout","stream":"downstream","attributes":{"timeout":1500}}`, 2*time.Second)
	case "mem-reset":
		return c.toxic(ctx, kind, target, `{"name":"rst","type":"reset_peer","stream":"downstream","attributes":{"timeout":0}}`, 500*time.Millisecond)
	case "mem-partition", "peer-partition":
		l := t.links[linkName(kind, target)]
		l.Stop()
		sleep(ctx, 3*time.Second)
		return l.Start()
	}
	return fmt.Errorf("unknown fault kind %q", kind)
}

type atomicInt = atomic.Int64

func linkName(kind string, target int) string {
	if strings.HasPrefix(kind, "peer-") {
		return fmt.Sprintf("peer-%d", target)
	}
	return fmt.Sprintf("mem-%d", target)
}

func (c *campaign) toxic(ctx context.Context, kind string, target int, spec string, d time.Duration) error {
	l := c.topo.links[linkName(kind, target)]
	w, err := l.Toxics.AddToxicJson(strings.NewReader(spec))
	if err != nil {
		return err
	}
	sleep(ctx, d)
	return l.Toxics.RemoveToxic(context.Background(), w.Name)
}
