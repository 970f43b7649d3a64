package baseline_test

import (
	"context"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// cluster is one in-process memory node with client nodes on memfab.
type cluster struct {
	host *memnode.Server
	eps  []*memfab.Endpoint
}

func newCluster(t testing.TB, nodes int, entries uint64) *cluster {
	t.Helper()
	host := memnode.New(memnode.Config{Entries: entries, DeadAfter: time.Hour})
	t.Cleanup(host.Close)
	f := memfab.New(host)
	cl := &cluster{host: host}
	for i := 0; i < nodes; i++ {
		ep, err := f.Join("client")
		if err != nil {
			t.Fatal(err)
		}
		cl.eps = append(cl.eps, ep)
	}
	return cl
}

func (cl *cluster) lockers(mk func(rdma.Endpoint) shiftlock.Locker) []shiftlock.Locker {
	ls := make([]shiftlock.Locker, len(cl.eps))
	for i, ep := range cl.eps {
		ls[i] = mk(ep)
	}
	return ls
}

// word reads the first 8 bytes of entry i straight from the memory node.
func (cl *cluster) word(t testing.TB, i uint64) uint64 {
	t.Helper()
	w, err := cl.host.Region(rdma.RegionLocks).Load8(i * 16)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// delta runs f and returns the verbs ep issued meanwhile.
func delta(ep rdma.Endpoint, f func()) rdma.Snapshot {
	before := ep.Counters().Snapshot()
	f()
	return ep.Counters().Snapshot().Sub(before)
}

// eventually polls cond until it holds; the test's context bounds the wait.
func eventually(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("never happened: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
