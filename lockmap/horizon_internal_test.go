package lockmap

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
)

// TestHorizonWithinWhatTheMemoryNodeCounts: after a grant of the longest
// TTL the memory node allows, the horizon a lease publishes is within
// rdma.MaxHorizon, the most the memory node counts of one. Were it longer,
// the memory node would count less than the proxy relies on, and could
// recover the proxy's entries, or restart and grant them again, while its
// clients still held them.
func TestHorizonWithinWhatTheMemoryNodeCounts(t *testing.T) {
	const maxLease, deadAfter = 8 * time.Second, 2 * time.Second
	host := memnode.New(memnode.Config{Entries: 16, HeartbeatInterval: 50 * time.Millisecond, DeadAfter: deadAfter, MaxLease: maxLease})
	t.Cleanup(host.Close)
	ep, err := memfab.New(host).Join("proxy")
	if err != nil {
		t.Fatal(err)
	}
	ls := NewLease(ep)
	t.Cleanup(ls.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		err := ls.Cover(ctx, time.Now().Add(maxLease), maxLease)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no lease to grant under: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // the first beat is on its way
	}
	limit := rdma.MaxHorizon(maxLease, deadAfter)
	if h := ls.horizon(); h > limit || h < maxLease {
		t.Fatalf("a lease that granted a %v TTL publishes %v; want within [%v, %v]", maxLease, h, maxLease, limit)
	}
	slot := ep.Layout().NodeSlotAddr(ep.Node())
	var b [8]byte
	if err := ep.Read(ctx, rdma.Addr{Region: slot.Region, Offset: slot.Offset + rdma.SlotHorizon}, b[:]); err != nil {
		t.Fatal(err)
	}
	if ms := time.Duration(binary.LittleEndian.Uint64(b[:])) * time.Millisecond; ms > limit || ms < maxLease {
		t.Fatalf("the node slot says %v after a %v grant; want within [%v, %v]", ms, maxLease, maxLease, limit)
	}
}
