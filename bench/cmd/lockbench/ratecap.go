package main

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// limiter is an IOPS budget for the memory node, shared by every client
// endpoint of a run the way an RNIC's inbound IOPS bound all of its clients
// together (ShiftLock §2.3, §4.3). Verbs are served first come, first
// served at rate per second: a verb that finds budget left goes at once,
// others queue and are released by a dispatcher goroutine as budget accrues.
// The dispatcher spins (yielding) while verbs wait, because Go timers round
// sub-millisecond sleeps up to a millisecond when the process is idle, which
// would add that much to every queued verb. Up to burst of unused budget is
// kept, as an idle NIC can absorb a burst.
type limiter struct {
	per   float64 // ns per verb
	burst float64 // most tokens kept

	mu     sync.Mutex
	tokens float64
	last   time.Time
	queue  []chan struct{} // FIFO of waiters, each for one verb
	head   int
	wake   chan struct{}
	quit   chan struct{}
	done   chan struct{}
}

func newLimiter(rate float64, burst time.Duration) *limiter {
	l := &limiter{per: float64(time.Second) / rate, last: time.Now(),
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	l.burst = max(1, float64(burst)/l.per)
	l.tokens = l.burst
	go l.dispatch()
	return l
}

func (l *limiter) stop() { close(l.quit); <-l.done }

// refill adds the budget accrued since the last call; l.mu is held.
func (l *limiter) refill(now time.Time) {
	l.tokens = min(l.burst, l.tokens+float64(now.Sub(l.last))/l.per)
	l.last = now
}

// take waits until n verbs may go.
func (l *limiter) take(n int) {
	for i := 0; i < n; i++ {
		l.mu.Lock()
		l.refill(time.Now())
		if l.head == len(l.queue) && l.tokens >= 1 {
			l.tokens--
			l.mu.Unlock()
			continue
		}
		ch := make(chan struct{})
		l.queue = append(l.queue, ch)
		first := l.head == len(l.queue)-1
		l.mu.Unlock()
		if first {
			select {
			case l.wake <- struct{}{}:
			default:
			}
		}
		<-ch
	}
}

func (l *limiter) dispatch() {
	defer close(l.done)
	for {
		select {
		case <-l.quit:
			return
		case <-l.wake:
		}
		for {
			l.mu.Lock()
			l.refill(time.Now())
			for l.head < len(l.queue) && l.tokens >= 1 {
				l.tokens--
				close(l.queue[l.head])
				l.queue[l.head] = nil
				l.head++
			}
			empty := l.head == len(l.queue)
			if empty {
				l.queue, l.head = l.queue[:0], 0
			}
			l.mu.Unlock()
			if empty {
				break
			}
			select {
			case <-l.quit:
				return
			default:
			}
			runtime.Gosched()
		}
	}
}

// cappedEndpoint charges every one-sided verb to a limiter. Sends go from
// client to client and do not reach the memory node, so they are free.
type cappedEndpoint struct {
	rdma.Endpoint
	lim *limiter
}

func (e *cappedEndpoint) Read(ctx context.Context, a rdma.Addr, p []byte) error {
	e.lim.take(1)
	return e.Endpoint.Read(ctx, a, p)
}

func (e *cappedEndpoint) Write(ctx context.Context, a rdma.Addr, p []byte) error {
	e.lim.take(1)
	return e.Endpoint.Write(ctx, a, p)
}

func (e *cappedEndpoint) CAS(ctx context.Context, a rdma.Addr, cmp, swap uint64) (uint64, error) {
	e.lim.take(1)
	return e.Endpoint.CAS(ctx, a, cmp, swap)
}

func (e *cappedEndpoint) FAA(ctx context.Context, a rdma.Addr, add uint64) (uint64, error) {
	e.lim.take(1)
	return e.Endpoint.FAA(ctx, a, add)
}

func (e *cappedEndpoint) MaskedCAS64(ctx context.Context, a rdma.Addr, cmp, cmpMask, swap, swapMask uint64) (uint64, error) {
	e.lim.take(1)
	return e.Endpoint.MaskedCAS64(ctx, a, cmp, cmpMask, swap, swapMask)
}

func (e *cappedEndpoint) MaskedFAA64(ctx context.Context, a rdma.Addr, add, boundary uint64) (uint64, error) {
	e.lim.take(1)
	return e.Endpoint.MaskedFAA64(ctx, a, add, boundary)
}

func (e *cappedEndpoint) MaskedCAS128(ctx context.Context, a rdma.Addr, cmp, cmpMask, swap, swapMask rdma.U128) (rdma.U128, error) {
	e.lim.take(1)
	return e.Endpoint.MaskedCAS128(ctx, a, cmp, cmpMask, swap, swapMask)
}

func (e *cappedEndpoint) MaskedFAA128(ctx context.Context, a rdma.Addr, add, boundary rdma.U128) (rdma.U128, error) {
	e.lim.take(1)
	return e.Endpoint.MaskedFAA128(ctx, a, add, boundary)
}

func (e *cappedEndpoint) Post(ctx context.Context, b *rdma.Batch) error {
	e.lim.take(b.Len())
	return e.Endpoint.Post(ctx, b)
}
