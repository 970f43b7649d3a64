package latfab_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shiftlock/shiftlock-proxy/bench/rdma/latfab"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
)

func setup(t *testing.T, cfg latfab.Config, n int) (*latfab.Fabric, []*latfab.Endpoint) {
	host := memnode.New(memnode.Config{Entries: 64, DeadAfter: time.Hour})
	t.Cleanup(host.Close)
	mf := memfab.New(host)
	f := latfab.New(cfg)
	t.Cleanup(f.Close)
	var eps []*latfab.Endpoint
	for range n {
		ep, err := mf.Join("t")
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, f.Wrap(ep))
	}
	return f, eps
}

// TestTiming checks, on the fake clock, that a verb takes its round trip,
// that the memory node's budget queues verbs that arrive together, that a
// batch is one trip with a queue place per verb, and that Sends arrive
// after their latency, in order, while the sender goes on.
func TestTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rtt, send = 2 * time.Microsecond, 3 * time.Microsecond
		_, eps := setup(t, latfab.Config{Verb: rtt, Send: send, IOPS: 1e6}, 10) // 1 µs per verb at the memory node
		ctx := context.Background()
		addr := eps[0].Layout().EntryAddr(1)

		start := time.Now()
		if _, err := eps[0].FAA(ctx, addr, 1); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != rtt+time.Microsecond {
			t.Errorf("one FAA took %v, want %v", d, rtt+time.Microsecond)
		}

		// Ten at once: the memory node serves one per µs, so the last
		// completes 10 µs after they arrive.
		start = time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var last time.Duration
		for _, ep := range eps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := ep.FAA(ctx, addr, 1); err != nil {
					t.Error(err)
				}
				mu.Lock()
				last = max(last, time.Since(start))
				mu.Unlock()
			}()
		}
		wg.Wait()
		if want := rtt + 10*time.Microsecond; last != want {
			t.Errorf("ten concurrent FAAs: the last took %v, want %v", last, want)
		}

		var b rdma.Batch
		var buf [16]byte
		b.Read(addr, buf[:])
		b.Read(addr, buf[:])
		b.Read(addr, buf[:])
		start = time.Now()
		if err := eps[1].Post(ctx, &b); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != rtt+3*time.Microsecond {
			t.Errorf("a batch of 3 READs took %v, want %v", d, rtt+3*time.Microsecond)
		}

		got := make(chan time.Duration, 2)
		var order []byte
		eps[2].Bind(func(m rdma.Message) error {
			order = append(order, m.Payload[0])
			got <- time.Since(start)
			return nil
		})
		start = time.Now()
		for _, v := range []byte{1, 2} {
			if err := eps[3].Send(ctx, eps[2].Node(), 0, rdma.Payload{v}); err != nil {
				t.Fatal(err)
			}
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("posting two Sends took %v", d)
		}
		for range 2 {
			if d := <-got; d != send {
				t.Errorf("a Send arrived after %v, want %v", d, send)
			}
		}
		if len(order) != 2 || order[0] != 1 || order[1] != 2 {
			t.Errorf("Sends arrived in order %v", order)
		}
	})
}

// TestAtomicsOnOneAddressSerialise: with a per-address atomic time, two
// atomics on one address take turns, two on different addresses overlap,
// and READs are not held up by atomics.
func TestAtomicsOnOneAddressSerialise(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rtt, per = 2 * time.Microsecond, 500 * time.Nanosecond
		_, eps := setup(t, latfab.Config{Verb: rtt, AtomicPerAddr: per}, 4)
		ctx := context.Background()
		at := func(addrs ...rdma.Addr) time.Duration {
			start := time.Now()
			var wg sync.WaitGroup
			for i, a := range addrs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := eps[i].FAA(ctx, a, 1); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			return time.Since(start)
		}
		one, other := eps[0].Layout().EntryAddr(1), eps[0].Layout().EntryAddr(2)
		if d := at(one, one, one); d != rtt+3*per {
			t.Errorf("three FAAs on one address took %v, want %v", d, rtt+3*per)
		}
		if d := at(one, other); d != rtt+per {
			t.Errorf("FAAs on two addresses took %v, want %v", d, rtt+per)
		}
		start := time.Now()
		var buf [16]byte
		if err := eps[3].Read(ctx, one, buf[:]); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != rtt {
			t.Errorf("a READ took %v, want %v", d, rtt)
		}
	})
}

// faas starts an FAA on a from each of eps, gap apart, and returns what
// waits for them all.
func faas(t *testing.T, eps []*latfab.Endpoint, a rdma.Addr, gap time.Duration) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ep.FAA(context.Background(), a, 1); err != nil {
				t.Error(err)
			}
		}()
		if gap > 0 {
			time.Sleep(gap)
		}
	}
	return &wg
}

// TestAtomicBlocksQueue: with AtomicBlocks, a READ that reaches the memory
// node behind atomics waiting for one address waits for them too; without
// it, it passes them.
func TestAtomicBlocksQueue(t *testing.T) {
	for _, blocks := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			const rtt, per = 2 * time.Microsecond, 500 * time.Nanosecond
			_, eps := setup(t, latfab.Config{Verb: rtt, AtomicPerAddr: per, AtomicBlocks: blocks}, 4)
			ctx := context.Background()
			one, other := eps[0].Layout().EntryAddr(1), eps[0].Layout().EntryAddr(2)
			start := time.Now()
			wg := faas(t, eps[:3], one, 0)
			// Arrive after the three FAAs, which take their address until
			// rtt/2 + 3*per.
			time.Sleep(per)
			var buf [8]byte
			if err := eps[3].Read(ctx, other, buf[:]); err != nil {
				t.Fatal(err)
			}
			want := per + rtt
			if blocks {
				want = rtt/2 + 3*per + rtt/2
			}
			if d := time.Since(start); d != want {
				t.Errorf("blocks=%v: the READ completed at %v, want %v", blocks, d, want)
			}
			wg.Wait()
		})
	}
}

// TestAtomicUnits: an atomic waiting for its address holds its slot, so
// with every slot taken an atomic on another address waits for one; with a
// slot to spare, or no bound, it passes.
func TestAtomicUnits(t *testing.T) {
	const rtt, per, gap = 2 * time.Microsecond, 500 * time.Nanosecond, 10 * time.Nanosecond
	for _, c := range []struct {
		units int
		want  time.Duration // the atomic on the other address, from its start
	}{
		{0, rtt + per},
		{3, rtt + per},
		// Slots: the first FAA until rtt/2+per, the second (waiting for
		// the first) until rtt/2+2per; the third takes the first's slot.
		{2, rtt/2 + 2*per - 2*gap + rtt/2},
	} {
		synctest.Test(t, func(t *testing.T) {
			_, eps := setup(t, latfab.Config{Verb: rtt, AtomicPerAddr: per, AtomicUnits: c.units}, 3)
			ctx := context.Background()
			one, other := eps[0].Layout().EntryAddr(1), eps[0].Layout().EntryAddr(2)
			wg := faas(t, eps[:2], one, gap) // arrive in this order
			start := time.Now()
			if _, err := eps[2].FAA(ctx, other, 1); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d != c.want {
				t.Errorf("units=%d: the FAA on the other address took %v, want %v", c.units, d, c.want)
			}
			wg.Wait()
		})
	}
}
