package shiftlock_test

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

func readOwner(t *testing.T, c *shiftlock.Client, i uint64) uint64 {
	var b [8]byte
	if err := c.Endpoint().Read(context.Background(), c.Endpoint().Layout().OwnerAddr(i), b[:]); err != nil {
		t.Error(err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// TestOwnerTagFollowsTheHolder: with owner tags on, a holder's confirmed
// owner word stays in place for the whole of its critical section, through
// handovers, mode changes, try-locks and abandoned waits, no holder ever
// sees another's confirmed word, and the word is 0 once all is released.
func TestOwnerTagFollowsTheHolder(t *testing.T) {
	cl := newCluster(t, 3, 8, shiftlock.Config{OwnerTags: true, Threshold: 4})
	var seq atomic.Uint64
	var bad atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 60; w++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			c := cl.clients[id%3]
			r := rand.New(rand.NewPCG(uint64(id), 5))
			for n := 0; n < 60; n++ {
				i := uint64(r.IntN(3))
				tag := seq.Add(1)
				if r.IntN(4) == 0 {
					g, err := c.AcquireShared(context.Background(), i)
					if err == nil {
						g.Release(context.Background())
					}
					continue
				}
				var g *shiftlock.Guard
				var err error
				switch r.IntN(3) {
				case 0:
					var ok bool
					g, ok, _, _, err = c.TryExclusiveTagged(context.Background(), i)
					if !ok {
						continue
					}
				case 1:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(200))*time.Microsecond)
					g, err = c.AcquireExclusiveTagged(ctx, i, tag)
					cancel()
					if err != nil {
						continue // abandoned: completes and releases in the background
					}
				default:
					g, err = c.AcquireExclusiveTagged(context.Background(), i, tag)
				}
				if err != nil {
					t.Error(err)
					return
				}
				// As the proxy does: confirm the tag once granted.
				if err := g.SetOwner(context.Background(), tag|1<<63); err != nil {
					t.Error(err)
				}
				if got := readOwner(t, c, i); got != tag|1<<63 {
					bad.Add(1)
					t.Errorf("entry %d: owner word %d while holder %d holds it", i, got, tag)
				}
				g.Release(context.Background())
			}
		}(w)
	}
	wg.Wait()
	for _, c := range cl.clients {
		c.Close(context.Background())
	}
	for i := uint64(0); i < 3; i++ {
		if got := readOwner(t, cl.clients[0], i); got != 0 {
			t.Errorf("entry %d free but owner word %d", i, got)
		}
	}
	if bad.Load() > 0 {
		t.Fatalf("%d critical sections saw another owner", bad.Load())
	}
}

// TestTaggedHandoverIsOneRoundTrip: the releasing holder installs its
// successor's tag with the handover FAA, in one batch.
func TestTaggedHandoverIsOneRoundTrip(t *testing.T) {
	cl := newCluster(t, 2, 8, shiftlock.Config{OwnerTags: true})
	a, b := cl.clients[0], cl.clients[1]
	ctx := context.Background()
	g, err := a.AcquireExclusiveTagged(ctx, 1, 111)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *shiftlock.Guard)
	go func() {
		g2, err := b.AcquireExclusiveTagged(ctx, 1, 222)
		if err != nil {
			t.Error(err)
		}
		got <- g2
	}()
	awaitSuccessor(t, g)
	before := a.Endpoint().Counters().Snapshot()
	g.Release(ctx)
	g2 := <-got
	d := a.Endpoint().Counters().Snapshot().Sub(before)
	if d.Out[rdma.VerbBatch] != 1 || d.OutAtomics() != 1 || d.Out[rdma.VerbWrite] != 1 {
		t.Fatalf("handover cost %d round trips, %d atomics, %d writes; want 1, 1, 1", d.Out[rdma.VerbBatch], d.OutAtomics(), d.Out[rdma.VerbWrite])
	}
	if o := readOwner(t, a, 1); o != 222 {
		t.Fatalf("owner after handover %d, want 222", o)
	}
	g2.Release(ctx)
	if o := readOwner(t, a, 1); o != 0 {
		t.Fatalf("owner after the last release %d", o)
	}
}
