package lockmap

import (
	"container/heap"
	"sync"
	"time"
)

// expirer runs TTL expiry for every hold with one goroutine and one timer: a
// min-heap of deadlines. Extending a hold pushes a new item; stale items
// (extended or released holds) are skipped when they come due.
type expirer struct {
	mu   sync.Mutex
	h    expHeap
	wake chan struct{}
	quit chan struct{}
	done chan struct{}
	fire func(*hold, time.Time)
}

type expItem struct {
	at time.Time
	h  *hold
}

type expHeap []expItem

func (x expHeap) Len() int           { return len(x) }
func (x expHeap) Less(i, j int) bool { return x[i].at.Before(x[j].at) }
func (x expHeap) Swap(i, j int)      { x[i], x[j] = x[j], x[i] }
func (x *expHeap) Push(v any)        { *x = append(*x, v.(expItem)) }
func (x *expHeap) Pop() any {
	old := *x
	it := old[len(old)-1]
	*x = old[:len(old)-1]
	return it
}

func newExpirer(fire func(*hold, time.Time)) *expirer {
	e := &expirer{wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}), fire: fire}
	go e.run()
	return e
}

func (e *expirer) add(h *hold, at time.Time) {
	e.mu.Lock()
	heap.Push(&e.h, expItem{at, h})
	first := e.h[0].h == h && e.h[0].at.Equal(at)
	e.mu.Unlock()
	if first {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

func (e *expirer) run() {
	defer close(e.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		e.mu.Lock()
		var due []expItem
		now := time.Now()
		for len(e.h) > 0 && !e.h[0].at.After(now) {
			due = append(due, heap.Pop(&e.h).(expItem))
		}
		next := time.Hour
		if len(e.h) > 0 {
			next = time.Until(e.h[0].at)
		}
		e.mu.Unlock()
		for _, it := range due {
			e.fire(it.h, it.at)
		}
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
