package memnode_test

import (
	"errors"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// TestNodeIDsPerHostBounded: members from one host hold at most
// MaxNodesPerHost node IDs, counting those of ended memberships while they
// are out of circulation; other hosts, and in-process members, are not
// held back by it, and the host gets room again once its old IDs return.
func TestNodeIDsPerHostBounded(t *testing.T) {
	const perHost = 3
	host := memnode.New(memnode.Config{Entries: 16, MaxNodes: 100, MaxNodesPerHost: perHost,
		HeartbeatInterval: time.Hour, DeadAfter: 20 * time.Millisecond}) // IDs held 10 x dead_after
	t.Cleanup(host.Close)
	join := func(from string) (rdma.NodeID, error) {
		rep, err := host.Join(rdma.JoinRequest{Name: "n", From: from})
		return rep.Node, err
	}
	var ids []rdma.NodeID
	for i := 0; i < perHost; i++ {
		id, err := join("10.0.0.1")
		if err != nil {
			t.Fatalf("join %d from 10.0.0.1: %v", i, err)
		}
		ids = append(ids, id)
	}
	if _, err := join("10.0.0.1"); !errors.Is(err, rdma.ErrUnavailable) {
		t.Fatalf("join %d from one host: %v, want ErrUnavailable", perHost+1, err)
	}
	host.Leave(ids[0])
	if _, err := join("10.0.0.1"); !errors.Is(err, rdma.ErrUnavailable) {
		t.Fatalf("a join in place of a membership that just ended, whose ID is still held: %v", err)
	}
	if _, err := join("10.0.0.2"); err != nil {
		t.Fatalf("a join from another host: %v", err)
	}
	for i := 0; i < 2*perHost; i++ {
		if _, err := join(""); err != nil {
			t.Fatalf("in-process join %d: %v", i, err)
		}
	}
	if n := host.Stats().JoinsRefusedPerHost.Load(); n != 2 {
		t.Fatalf("%d joins counted as refused, want 2", n)
	}
	// The ended membership's ID comes back after its quarantine; so does
	// the host's room.
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := join("10.0.0.1"); err == nil {
			break
		} else if time.Now().After(end) {
			t.Fatalf("still refused 30 s after a membership ended: %v", err)
		}
	}
}
