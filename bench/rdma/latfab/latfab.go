// Package latfab gives another fabric's endpoints the timing of an RDMA
// testbed: a latency on every one-sided verb, a latency on every Send, and a
// budget of verbs per second at the memory node, shared by all endpoints the
// way an RNIC's inbound IOPS bound all of its clients together.
//
// It exists for microbenchmarks that must put the bottleneck where the
// ShiftLock paper's testbed has it. There, about 66 verbs complete per round
// trip (32M verbs/s at 2.05 µs), so the hottest key of a Zipf workload is
// served one handover at a time and saturates; on the TCP soft-NIC about 5
// do, and the verb budget binds first. latfab wraps memfab endpoints and
// waits with time.Sleep, so the model costs no CPU while it waits.
//
// Go's timers overshoot short sleeps by up to a millisecond on an idle
// process, so in real time latfab is only a sketch. Run under
// testing/synctest's fake clock (lockbench's model runs do), time advances
// only when every goroutine waits: the latencies are then exact, and the
// CPU the clients spend costs no time at all, as on a testbed with a core
// per client thread.
//
// Timing of a one-sided verb (or a batch of n, one doorbell): half of
// Config.Verb to reach the memory node; a place in its queue, which serves
// IOPS verbs per second first come first served; execution; the other half
// back. A Send is posted: the sender goes on at once, and the message
// arrives Config.Send later, in order with the other messages to the same
// node. A failed delivery is not reported to the sender (nothing waits for
// a posted Send's completion here).
package latfab

import (
	"context"
	"sync"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// Config is a testbed's timing.
type Config struct {
	// Verb is the round trip of a one-sided verb, half each way.
	Verb time.Duration
	// Send is the one-way latency of a message.
	Send time.Duration
	// IOPS bounds the verbs the memory node executes per second, all
	// endpoints together; 0 means no bound.
	IOPS float64
	// AtomicPerAddr is how long an atomic occupies its address at the
	// memory node: atomics on one address execute one after another (an
	// RNIC may let nothing on that address between an atomic's read and
	// its write), while those on different addresses overlap. 0 means
	// atomics cost only their share of IOPS.
	AtomicPerAddr time.Duration
	// AtomicBlocks makes an atomic that waits for its address hold up the
	// whole memory node queue behind it, as an RNIC that executes its
	// requests in order would (head-of-line blocking). Without it, only
	// atomics on the same address wait for each other.
	AtomicBlocks bool
	// AtomicUnits bounds the atomics the memory node works on at once, as
	// an RNIC's atomic engine has a fixed number of slots. An atomic takes
	// the first slot to come free and holds it until it completes, through
	// its wait for its address: a long queue on one hot address then
	// occupies slots that atomics on other addresses need. 0: no bound
	// (only AtomicPerAddr applies).
	AtomicUnits int
}

// Fabric is the shared part: the memory node's queue and the mailboxes.
type Fabric struct {
	cfg Config
	per time.Duration // service time of one verb at the memory node

	mu       sync.Mutex
	nicFree  time.Time               // when the memory node's queue is next idle
	addrFree map[rdma.Addr]time.Time // when an address's last atomic is done (AtomicPerAddr)
	units    []time.Time             // when each atomic slot is next free (AtomicUnits)
	boxes    map[rdma.NodeID]*mailbox
	done     chan struct{} // closed by Close: mailboxes stop
	closed   bool
}

// New returns a fabric with cfg's timing.
func New(cfg Config) *Fabric {
	f := &Fabric{cfg: cfg, boxes: map[rdma.NodeID]*mailbox{}, addrFree: map[rdma.Addr]time.Time{}, done: make(chan struct{})}
	if cfg.IOPS > 0 {
		f.per = time.Duration(float64(time.Second) / cfg.IOPS)
	}
	if cfg.AtomicUnits > 0 {
		f.units = make([]time.Time, cfg.AtomicUnits)
	}
	return f
}

// Config is the fabric's timing.
func (f *Fabric) Config() Config { return f.cfg }

// Wrap returns ep with the fabric's timing. Wrap every endpoint of a run
// with the same Fabric, so that they share one memory node queue.
func (f *Fabric) Wrap(ep rdma.Endpoint) *Endpoint { return &Endpoint{Endpoint: ep, f: f} }

// served waits until the memory node has executed n verbs that arrive now,
// behind the ones already queued, atomics among them (on atomics' addresses)
// also behind earlier atomics on the same address.
func (f *Fabric) served(n int, atomics []rdma.Addr) {
	blocks := f.cfg.AtomicBlocks && f.cfg.AtomicPerAddr > 0
	if f.per <= 0 && !blocks && (f.cfg.AtomicPerAddr <= 0 || len(atomics) == 0) {
		return
	}
	f.mu.Lock()
	now := time.Now()
	done := now
	if f.per > 0 || blocks {
		start := f.nicFree
		if start.Before(now) {
			start = now
		}
		f.nicFree = start.Add(time.Duration(n) * f.per)
		done = f.nicFree
	}
	if f.cfg.AtomicPerAddr > 0 {
		for _, a := range atomics {
			slot := -1
			if len(f.units) > 0 {
				slot = 0
				for i, t := range f.units {
					if t.Before(f.units[slot]) {
						slot = i
					}
				}
				if f.units[slot].After(done) {
					done = f.units[slot]
				}
			}
			start := f.addrFree[a]
			if start.Before(done) {
				start = done
			}
			done = start.Add(f.cfg.AtomicPerAddr)
			f.addrFree[a] = done
			if slot >= 0 {
				f.units[slot] = done
			}
		}
		if blocks && done.After(f.nicFree) {
			f.nicFree = done
		}
	}
	f.mu.Unlock()
	sleepUntil(done)
}

func sleepUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		time.Sleep(d)
	}
}

// mailbox delivers one node's incoming messages in order, each at its time.
type mailbox struct {
	ch chan delivery
}

type delivery struct {
	at time.Time
	do func()
}

// post queues do to run at at on to's mailbox.
func (f *Fabric) post(to rdma.NodeID, at time.Time, do func()) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	b := f.boxes[to]
	if b == nil {
		b = &mailbox{ch: make(chan delivery, 1024)}
		f.boxes[to] = b
		go b.run(f.done)
	}
	f.mu.Unlock()
	select {
	case b.ch <- delivery{at, do}:
	case <-f.done:
	}
}

func (b *mailbox) run(done <-chan struct{}) {
	for {
		select {
		case d := <-b.ch:
			sleepUntil(d.at)
			d.do()
		case <-done:
			return
		}
	}
}

// Close stops the mailboxes. Messages still queued are dropped.
func (f *Fabric) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.done)
	}
}

// Endpoint is an endpoint with the fabric's timing. Everything but the
// verbs and Send passes through to the wrapped endpoint.
type Endpoint struct {
	rdma.Endpoint
	f *Fabric
}

var _ rdma.Endpoint = (*Endpoint)(nil)

// verb times n verbs posted together around do, which executes them;
// atomics are the addresses of the atomics among them.
func (e *Endpoint) verb(n int, atomics []rdma.Addr, do func()) {
	half := e.f.cfg.Verb / 2
	if half > 0 {
		time.Sleep(half)
	}
	e.f.served(n, atomics)
	do()
	if half > 0 {
		time.Sleep(e.f.cfg.Verb - half)
	}
}

func (e *Endpoint) Read(ctx context.Context, a rdma.Addr, p []byte) (err error) {
	e.verb(1, nil, func() { err = e.Endpoint.Read(ctx, a, p) })
	return err
}

func (e *Endpoint) Write(ctx context.Context, a rdma.Addr, p []byte) (err error) {
	e.verb(1, nil, func() { err = e.Endpoint.Write(ctx, a, p) })
	return err
}

func (e *Endpoint) CAS(ctx context.Context, a rdma.Addr, cmp, swap uint64) (old uint64, err error) {
	e.verb(1, []rdma.Addr{a}, func() { old, err = e.Endpoint.CAS(ctx, a, cmp, swap) })
	return old, err
}

func (e *Endpoint) FAA(ctx context.Context, a rdma.Addr, add uint64) (old uint64, err error) {
	e.verb(1, []rdma.Addr{a}, func() { old, err = e.Endpoint.FAA(ctx, a, add) })
	return old, err
}

func (e *Endpoint) MaskedCAS64(ctx context.Context, a rdma.Addr, cmp, cmpMask, swap, swapMask uint64) (old uint64, err error) {
	e.verb(1, []rdma.Addr{a}, func() { old, err = e.Endpoint.MaskedCAS64(ctx, a, cmp, cmpMask, swap, swapMask) })
	return old, err
}

func (e *Endpoint) MaskedFAA64(ctx context.Context, a rdma.Addr, add, boundary uint64) (old uint64, err error) {
	e.verb(1, []rdma.Addr{a}, func() { old, err = e.Endpoint.MaskedFAA64(ctx, a, add, boundary) })
	return old, err
}

func (e *Endpoint) MaskedCAS128(ctx context.Context, a rdma.Addr, cmp, cmpMask, swap, swapMask rdma.U128) (old rdma.U128, err error) {
	e.verb(1, []rdma.Addr{a}, func() { old, err = e.Endpoint.MaskedCAS128(ctx, a, cmp, cmpMask, swap, swapMask) })
	return old, err
}

func (e *Endpoint) MaskedFAA128(ctx context.Context, a rdma.Addr, add, boundary rdma.U128) (old rdma.U128, err error) {
	e.verb(1, []rdma.Addr{a}, func() { old, err = e.Endpoint.MaskedFAA128(ctx, a, add, boundary) })
	return old, err
}

// Post is one doorbell: one trip each way for the whole batch, and one
// place in the memory node's queue per verb.
func (e *Endpoint) Post(ctx context.Context, b *rdma.Batch) (err error) {
	var atomics []rdma.Addr
	if e.f.cfg.AtomicPerAddr > 0 {
		for i := range b.Ops {
			if b.Ops[i].Verb.IsAtomic() {
				atomics = append(atomics, b.Ops[i].Addr)
			}
		}
	}
	e.verb(max(b.Len(), 1), atomics, func() { err = e.Endpoint.Post(ctx, b) })
	return err
}

// Send posts the message; it arrives Config.Send from now.
func (e *Endpoint) Send(ctx context.Context, to rdma.NodeID, t rdma.Target, p rdma.Payload) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	e.f.post(to, time.Now().Add(e.f.cfg.Send), func() { _ = e.Endpoint.Send(ctx, to, t, p) })
	return nil
}
