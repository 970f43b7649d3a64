package fisslock

import (
	"container/heap"
	"sync"
	"time"
)

// core is one serial packet processor: the switch's pipeline or a machine's
// agent-pool core. Packets arrive after their link's latency and are served
// one at a time, each taking cost. Arrivals are kept in time order (a heap),
// because a machine's core gets packets both over the network and, with no
// latency, from its own clients.
type core struct {
	cost   time.Duration
	handle func(pkt)

	mu      sync.Mutex
	q       arrivals
	seq     uint64
	wake    chan struct{}
	done    chan struct{}
	stopped chan struct{}
	served  uint64
}

func newCore(cost time.Duration, handle func(pkt)) *core {
	c := &core{cost: cost, handle: handle, wake: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{})}
	go c.run()
	return c
}

// push delivers p after delay.
func (c *core) push(p pkt, delay time.Duration) {
	c.mu.Lock()
	c.seq++
	heap.Push(&c.q, arrival{at: time.Now().Add(delay), seq: c.seq, p: p})
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *core) run() {
	defer close(c.stopped)
	for {
		c.mu.Lock()
		if len(c.q) == 0 {
			c.mu.Unlock()
			select {
			case <-c.wake:
				continue
			case <-c.done:
				return
			}
		}
		next := c.q[0]
		if d := time.Until(next.at); d > 0 {
			c.mu.Unlock()
			// A packet pushed meanwhile can only arrive later than this
			// one if every link has one latency; a local push (no latency)
			// may arrive sooner, so the wait is cut short by a wake.
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-c.wake:
				t.Stop()
			case <-c.done:
				t.Stop()
				return
			}
			continue
		}
		heap.Pop(&c.q)
		c.served++
		c.mu.Unlock()
		if c.cost > 0 {
			time.Sleep(c.cost)
		}
		c.handle(next.p)
	}
}

func (c *core) close() {
	close(c.done)
	<-c.stopped
}

func (c *core) packets() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.served
}

type arrival struct {
	at  time.Time
	seq uint64
	p   pkt
}

type arrivals []arrival

func (a arrivals) Len() int { return len(a) }
func (a arrivals) Less(i, j int) bool {
	if !a[i].at.Equal(a[j].at) {
		return a[i].at.Before(a[j].at)
	}
	return a[i].seq < a[j].seq
}
func (a arrivals) Swap(i, j int) { a[i], a[j] = a[j], a[i] }
func (a *arrivals) Push(x any)   { *a = append(*a, x.(arrival)) }
func (a *arrivals) Pop() any {
	old := *a
	x := old[len(old)-1]
	*a = old[:len(old)-1]
	return x
}
