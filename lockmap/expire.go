package lockmap

import (
	"container/heap"
	"math"
	"sync"
	"time"
)

// expirer runs TTL expiry for every hold with one goroutine and one timer: a
// min-heap of deadlines with one item per hold, which a hold leaves as soon
// as it is released, so the heap holds only live TTLs however many locks
// come and go.
type expirer struct {
	mu sync.Mutex
	h  expHeap
	// armed is when the goroutine's timer fires next, or will once it
	// has looked at the heap: an add that is due no earlier need not wake
	// it, which on the uncontended path (every hold heap-first on an
	// otherwise empty heap) saves a goroutine wake-up per acquire.
	armed time.Time
	wake  chan struct{}
	quit  chan struct{}
	done  chan struct{}
	fire  func(*hold, time.Time)

	// ends counts the scheduled holds by deadline, for latest: the heap
	// only knows the earliest.
	ends deadlines
}

// deadlines counts deadlines by their second after base, to tell the
// latest one counted. Buckets that empty stay at zero until latest prunes
// them (deleting a small map's last key has Go draw a new hash seed, a
// random read, on every uncontended release). The caller locks.
type deadlines struct {
	base  time.Time
	secs  map[int64]bucket
	top   int64 // the latest bucket in use, if !stale
	live  int   // buckets in use
	stale bool
}

func newDeadlines() deadlines { return deadlines{base: time.Now(), secs: map[int64]bucket{}} }

// bucket is one second of deadlines: how many holds end in it, and the
// latest deadline added since it was last empty (after base), which is no
// earlier than any of theirs. Exact rather than the second's end: a lease
// publishes the latest deadline, and one that jittered up to a second above
// the TTL would outgrow the confirmed horizon on every other beat.
type bucket struct {
	n    int32
	last time.Duration
}

// expHeap orders holds by deadline; each hold knows its index (expIdx,
// -1 when absent), guarded by the expirer's lock.
type expHeap []*hold

func (x expHeap) Len() int           { return len(x) }
func (x expHeap) Less(i, j int) bool { return x[i].expAt.Before(x[j].expAt) }
func (x expHeap) Swap(i, j int) {
	x[i], x[j] = x[j], x[i]
	x[i].expIdx, x[j].expIdx = i, j
}
func (x *expHeap) Push(v any) {
	h := v.(*hold)
	h.expIdx = len(*x)
	*x = append(*x, h)
}
func (x *expHeap) Pop() any {
	old := *x
	h := old[len(old)-1]
	old[len(old)-1] = nil
	*x = old[:len(old)-1]
	h.expIdx = -1
	return h
}

func newExpirer(fire func(*hold, time.Time)) *expirer {
	e := &expirer{wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}), fire: fire,
		ends: newDeadlines()}
	go e.run()
	return e
}

// add schedules h to expire at at, moving it if it was already scheduled.
func (e *expirer) add(h *hold, at time.Time) {
	e.mu.Lock()
	if h.expIdx >= 0 {
		e.ends.count(h.expAt, -1)
	}
	e.ends.count(at, 1)
	h.expAt = at
	if h.expIdx >= 0 {
		heap.Fix(&e.h, h.expIdx)
	} else {
		heap.Push(&e.h, h)
	}
	wake := e.h[0] == h && at.Before(e.armed)
	if wake {
		e.armed = at
	}
	e.mu.Unlock()
	if wake {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

// remove unschedules h, if it was scheduled.
func (e *expirer) remove(h *hold) {
	e.mu.Lock()
	if h.expIdx >= 0 {
		e.ends.count(h.expAt, -1)
		heap.Remove(&e.h, h.expIdx)
	}
	e.mu.Unlock()
}

// count adds n deadlines at at to its second's bucket.
func (e *deadlines) count(at time.Time, n int32) {
	d := at.Sub(e.base) // the monotonic clock: a wall clock step moves nothing
	b := int64(d / time.Second)
	c := e.secs[b]
	was := c.n
	c.n += n
	switch {
	case was == 0:
		e.live++
		if b > e.top {
			e.top = b
		}
	case c.n == 0:
		e.live--
		c.last = 0
		if b == e.top {
			e.stale = true
		}
	}
	if n > 0 && d > c.last {
		c.last = d
	}
	e.secs[b] = c
}

// latest is no earlier than every deadline counted, and zero if none is.
func (e *deadlines) latest() time.Time {
	if e.stale || len(e.secs) > 2*e.live+64 {
		e.top, e.stale = math.MinInt64, false
		for b, c := range e.secs {
			switch {
			case c.n == 0:
				delete(e.secs, b)
			case b > e.top:
				e.top = b
			}
		}
	}
	if e.live == 0 {
		return time.Time{}
	}
	return e.base.Add(e.secs[e.top].last)
}

// latest is no earlier than the deadline of every hold scheduled, and
// zero if none is: what the leases publish for the holds in force.
func (e *expirer) latest() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ends.latest()
}

// poke makes the goroutine look at the heap now: a command found holds past
// their deadline before their timer fired.
func (e *expirer) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *expirer) run() {
	defer close(e.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	type due struct {
		h  *hold
		at time.Time
	}
	var fire []due
	for {
		e.mu.Lock()
		now := time.Now()
		for len(e.h) > 0 && !e.h[0].expAt.After(now) {
			h := heap.Pop(&e.h).(*hold)
			e.ends.count(h.expAt, -1)
			fire = append(fire, due{h, h.expAt})
		}
		next := time.Hour
		if len(e.h) > 0 {
			next = e.h[0].expAt.Sub(now)
		}
		e.armed = now.Add(next)
		e.mu.Unlock()
		for _, d := range fire {
			e.fire(d.h, d.at)
		}
		clear(fire)
		fire = fire[:0]
		t.Reset(next)
		select {
		case <-t.C:
		case <-e.wake:
		case <-e.quit:
			return
		}
	}
}

func (e *expirer) stop() {
	select {
	case <-e.quit:
	default:
		close(e.quit)
	}
	<-e.done
}
