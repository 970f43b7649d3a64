package memnode

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// TestLateSweepKeepsTheWholeHorizon: a sweep that runs late, as a tick
// delivered on a loaded host does, still gives a beat its whole horizon
// from when the member sent it. Dating the beat with the sweep's time
// ended a departed member's horizon early by the delay, and a range repair
// went ahead while its grants could still be in force
// (TestRangeRepairAfterDeath under load: repaired 367 ms after a beat
// carrying 400 ms).
func TestLateSweepKeepsTheWholeHorizon(t *testing.T) {
	// No sweep of the monitor's own while the test's runs.
	s := New(Config{Entries: 16, HeartbeatInterval: time.Hour, DeadAfter: 2 * time.Hour})
	t.Cleanup(s.Close)
	rep, err := s.Join(rdma.JoinRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	const horizon = 400 * time.Millisecond
	due := time.Now() // when the late sweep's tick fired
	time.Sleep(20 * time.Millisecond)
	sent := time.Now()
	var beat [16]byte
	binary.LittleEndian.PutUint64(beat[rdma.SlotHorizon:], uint64(horizon/time.Millisecond))
	binary.LittleEndian.PutUint64(beat[rdma.SlotSeq:], 1)
	if err := s.nodes.Write(rdma.NodeSlotSize*uint64(rep.Node), beat[:]); err != nil {
		t.Fatal(err)
	}
	s.sweep(due)
	s.mu.Lock()
	got := s.members[rep.Node].horizon
	s.mu.Unlock()
	if want := sent.Add(horizon); got.Before(want) {
		t.Fatalf("a beat sent at %v with a %v horizon is held until %v, %v short", sent.Format(time.StampMicro), horizon, got.Format(time.StampMicro), want.Sub(got))
	}
}

// memStore is a StateStore in memory.
type memStore struct {
	mu sync.Mutex
	st State
}

func (m *memStore) Update(f func(*State) bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(&m.st)
	return nil
}

func (m *memStore) Get() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st
}

// TestSavedHorizonFallsToNothing: a saved horizon below lowerMin (two
// passes in one millisecond observed the same small target, and lowered
// to it) still falls to nothing once nothing is in force. It used to stay
// saved for good, as TestSavedHorizonComesDown found now and then on a
// loaded host ("saved horizon still 79 ms long after every lease ran out").
func TestSavedHorizonFallsToNothing(t *testing.T) {
	st := &memStore{st: State{MaxHorizonMs: 79}}
	s := New(Config{Entries: 16, HeartbeatInterval: time.Hour, DeadAfter: 2 * time.Hour, Store: st})
	t.Cleanup(s.Close)
	now := time.Now()
	s.persist(now) // confirms 0: no member, no tomb
	s.persist(now.Add(lowerEvery))
	if h := st.Get().MaxHorizonMs; h != 0 {
		t.Fatalf("saved horizon %d ms with nothing in force", h)
	}
}

// maxFence is the largest fence word of any tree, and no less than the
// high-water mark it started from, whether the region holds the trees
// exactly (the one-pass scan) or has room past the last one (the loop,
// which must not read that room as a tree).
func TestMaxFence(t *testing.T) {
	for _, c := range []struct {
		name             string
		treeBytes, bytes uint64
	}{{"exact", 64, 4 * 64}, {"room past the last tree", 64, 4*64 + 48}} {
		t.Run(c.name, func(t *testing.T) {
			s := New(Config{Entries: 8, RangeTreeBytes: c.treeBytes, RangeBytes: c.bytes, HeartbeatInterval: time.Hour, DeadAfter: 2 * time.Hour})
			t.Cleanup(s.Close)
			p := s.rng
			if p.n != 4 {
				t.Fatalf("%d trees, want 4", p.n)
			}
			var b [8]byte
			put := func(off, v uint64) {
				binary.LittleEndian.PutUint64(b[:], v)
				if err := s.ranges.Write(off, b[:]); err != nil {
					t.Fatal(err)
				}
			}
			p.fenceHW = 5
			if got := p.maxFence(); got != 5 {
				t.Fatalf("empty trees: %d, want the high-water mark 5", got)
			}
			put(2*c.treeBytes, 40) // tree 2's fence
			put(3*c.treeBytes, 30)
			put(c.treeBytes+8, 99) // not a fence: tree 1's second word
			if got := p.maxFence(); got != 40 {
				t.Fatalf("maxFence %d, want 40", got)
			}
			if room := s.ranges.Size() - p.n*c.treeBytes; room >= 8 {
				put(p.n*c.treeBytes, 77) // past the last tree
				if got := p.maxFence(); got != 40 {
					t.Fatalf("maxFence read the room past the last tree: %d", got)
				}
			}
		})
	}
}
