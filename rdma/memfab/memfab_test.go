package memfab_test

import (
	"context"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/fabrictest"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
)

func TestConformance(t *testing.T) {
	// The endpoints never beat: a death deadline of the default second would
	// fence them mid-suite on a loaded host (-race, 48 goroutines on one entry).
	host := memnode.New(memnode.Config{Entries: 1 << 14, DeadAfter: time.Hour})
	t.Cleanup(host.Close)
	f := memfab.New(host)
	fabrictest.Run(t, func(t *testing.T, name string) rdma.Endpoint {
		e, err := f.Join(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	})
}

func TestProbeReachesHandler(t *testing.T) {
	host := memnode.New(memnode.Config{Entries: 16})
	t.Cleanup(host.Close)
	f := memfab.New(host)
	e, _ := f.Join("p")
	if h, _ := f.Probe(context.Background(), e.Node(), 3); h != rdma.HoldActive {
		t.Fatalf("unbound probe must answer active, got %v", h)
	}
	e.BindProbe(func(entry uint64) rdma.Hold { return rdma.Hold(entry % 3) })
	if h, _ := f.Probe(context.Background(), e.Node(), 4); h != rdma.HoldWaiting {
		t.Fatalf("probe answered %v", h)
	}
}

// BenchmarkMaskedCAS128 is the single-core rate of the verb a writer
// enqueues with. Run with -cpu 1.
func BenchmarkMaskedCAS128(b *testing.B) {
	host := memnode.New(memnode.Config{Entries: 1 << 10})
	defer host.Close()
	e, _ := memfab.New(host).Join("bench")
	ctx := context.Background()
	tail := rdma.NewField(0, 40)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e.MaskedCAS128(ctx, e.Layout().EntryAddr(uint64(i)&1023), rdma.U128{}, rdma.U128{}, tail.Value(uint64(i)), tail.Mask())
	}
}
