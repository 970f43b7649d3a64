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

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// injectFaults runs one fault every FaultEvery, rotating through the kinds,
// until the campaign ends. Faults never overlap, so each one's effect can be
// told apart.
func (c *campaign) injectFaults(ctx context.Context, held []atomic.Int64, heldKeys *sync.Map) {
	sleep(ctx, c.cfg.FaultEvery/2) // let the workload settle first
	for i := 0; ctx.Err() == nil; i++ {
		kind := c.cfg.Kinds[i%len(c.cfg.Kinds)]
		target := i % c.cfg.Proxies
		switch kind {
		case "kill-proxy", "pause-proxy", "stop-proxy":
			target = busiest(held[:c.cfg.Proxies])
		case "embedded-restart", "embedded-stop":
			target = c.cfg.Proxies
		}
		start := time.Now()
		err := c.inject(ctx, kind, target, heldKeys)
		end := time.Now()
		proxy := target
		if c.everyProxy(kind) {
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

// everyProxy reports whether a fault kind reaches every proxy: memory node
// and etcd faults, and, in HA campaigns, faults on the memory node's link.
func (c *campaign) everyProxy(kind string) bool {
	switch {
	case kind == "memnode-restart" || kind == "memnode-kill" || kind == "memnode-partition" || kind == "etcd-kill":
		return true
	case c.cfg.HA && strings.HasPrefix(kind, "mem-"):
		return true
	}
	return false
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
	pp := t.embedded
	if target < len(t.proxies) {
		pp = t.proxies[target]
	}
	switch kind {
	case "embedded-restart":
		if pp == nil {
			return fmt.Errorf("no embedded proxy in this campaign")
		}
		// kill -9, and the same command on the same state directory: it
		// serves again once every lock the dead process granted has run
		// out, and its clients, which still believe those locks, must not
		// see them granted again before.
		pp.p.Kill()
		sleep(ctx, time.Second)
		return t.startEmbedded()
	case "embedded-stop":
		if pp == nil {
			return fmt.Errorf("no embedded proxy in this campaign")
		}
		// A deploy: SIGTERM, a drain that gives up before the keeper lets
		// go (drainTimeout), and the same command on the same state
		// directory. The last beat counts only the locks left held, and
		// the next start must still wait those out.
		if err := pp.p.Stop(30 * time.Second); err != nil {
			return err
		}
		return t.startEmbedded()
	case "stop-proxy":
		// The same on the shared memory node: the locks the proxy left
		// held are recovered for the other proxies' clients once the last
		// beat's horizon has passed, and not before.
		if err := pp.p.Stop(30 * time.Second); err != nil {
			return err
		}
		sleep(ctx, time.Second)
		return t.startProxy(pp)
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
	case "memnode-kill", "memnode-partition":
		return c.depose(ctx, kind)
	case "etcd-kill":
		k := c.etcdN % t.etcd.Size()
		c.etcdN++
		t.etcd.Kill(k)
		sleep(ctx, 4*time.Second)
		return t.etcd.Start(k)
	case "mem-latency", "peer-latency":
		return c.toxic(ctx, kind, target, `{"name":"lat","type":"latency","stream":"downstream","attributes":{"latency":60,"jitter":40}}`, 3*time.Second)
	case "mem-timeout":
		// Data stops flowing; connections close after 1.5 s.
		return c.toxic(ctx, kind, target, `{"name":"to","type":"timeout","stream":"downstream","attributes":{"timeout":1500}}`, 2*time.Second)
	case "mem-reset":
		return c.toxic(ctx, kind, target, `{"name":"rst","type":"reset_peer","stream":"downstream","attributes":{"timeout":0}}`, 500*time.Millisecond)
	case "mem-partition", "peer-partition":
		l := t.links[c.linkName(kind, target)]
		l.Stop()
		sleep(ctx, 3*time.Second)
		return l.Start()
	}
	return fmt.Errorf("unknown fault kind %q", kind)
}

type atomicInt = atomic.Int64

// depose takes the active memory node away, by kill -9 or by cutting every
// link it has (to the proxies and to each etcd member), waits for the
// standby to take over, and then brings the old node back as a standby:
// restarted after a kill, reconnected after a partition, where it must find
// itself deposed.
func (c *campaign) depose(ctx context.Context, kind string) error {
	t := c.topo
	mp, rec, err := t.active(ctx)
	if err != nil {
		return err
	}
	var cut []string
	at := time.Now()
	if kind == "memnode-kill" {
		mp.p.Kill()
	} else {
		cut = append(cut, fmt.Sprintf("memnode-%d", mp.j))
		for k := range mp.etcdTx {
			cut = append(cut, fmt.Sprintf("etcd-%d-%d", mp.j, k))
		}
		for _, name := range cut {
			t.links[name].Stop()
		}
	}
	c.mu.Lock()
	c.fails = append(c.fails, failoverEvent{at: at, above: rec.RelHighWater + rdma.RecoveryLeap})
	c.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	var took error
	for {
		if now, err := t.record(ctx); err == nil && now.Generation > rec.Generation {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			took = fmt.Errorf("no takeover within 30 s of %s on memnode-%d", kind, mp.j)
			break
		}
		sleep(ctx, 50*time.Millisecond)
	}
	sleep(ctx, time.Second)
	for _, name := range cut {
		if err := t.links[name].Start(); err != nil {
			return err
		}
	}
	if kind == "memnode-kill" {
		if err := t.startHAMemnode(mp, memnodeStandby); err != nil {
			return err
		}
	}
	return took
}

func (c *campaign) linkName(kind string, target int) string {
	switch {
	case strings.HasPrefix(kind, "peer-"):
		return fmt.Sprintf("peer-%d", target)
	case c.cfg.HA:
		if mp, _, err := c.topo.active(context.Background()); err == nil {
			return fmt.Sprintf("memnode-%d", mp.j)
		}
		return "memnode-0"
	}
	return fmt.Sprintf("mem-%d", target)
}

func (c *campaign) toxic(ctx context.Context, kind string, target int, spec string, d time.Duration) error {
	l := c.topo.links[c.linkName(kind, target)]
	w, err := l.Toxics.AddToxicJson(strings.NewReader(spec))
	if err != nil {
		return err
	}
	sleep(ctx, d)
	return l.Toxics.RemoveToxic(context.Background(), w.Name)
}
