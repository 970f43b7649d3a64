package memnode_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
)

func TestHeartbeatKeepsAliveAndSilenceFences(t *testing.T) {
	// A 2 s death deadline against 20 ms beats: only a scheduling stall of
	// two seconds could fence the beating node. The silent one is waited
	// for, not slept for.
	host := memnode.New(memnode.Config{Entries: 16, HeartbeatInterval: 20 * time.Millisecond, DeadAfter: 2 * time.Second})
	t.Cleanup(host.Close)
	f := memfab.New(host)
	a, _ := f.Join("a")
	b, _ := f.Join("b")
	fenced := make(chan error, 1)
	hb := rdma.StartHeartbeat(a, func() time.Duration { return 0 }, func(err error) { fenced <- err })
	defer hb.Stop()
	for end := time.Now().Add(30 * time.Second); host.Admit(b.Node()) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("silent node still admitted after 30s")
		}
	}
	// a beats, b is silent.
	if err := host.Admit(a.Node()); err != nil {
		t.Fatalf("beating node was fenced: %v", err)
	}
	if err := host.Admit(b.Node()); err == nil {
		t.Fatal("silent node still admitted")
	}
	if _, err := b.FAA(context.Background(), b.Layout().EntryAddr(0), 1); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("fenced node's verb: %v", err)
	}
	// A rejoin gets a new ID: the old one may still be in lock entries.
	c, err := f.Join("b-again")
	if err != nil || c.Node() == b.Node() {
		t.Fatalf("rejoin: %v id %d (old %d)", err, c.Node(), b.Node())
	}
	select {
	case err := <-fenced:
		t.Fatalf("live node told it was fenced: %v", err)
	default:
	}
}

func TestHeartbeatLearnsItWasFenced(t *testing.T) {
	host, _, a := joinOne(t, memnode.Config{Entries: 16, HeartbeatInterval: 10 * time.Millisecond, DeadAfter: 50 * time.Millisecond})
	// Declared dead before it ever beats.
	for end := time.Now().Add(30 * time.Second); host.Admit(a.Node()) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("silent node still admitted after 30s")
		}
	}
	hb := rdma.StartHeartbeat(a, func() time.Duration { return 0 }, nil)
	defer hb.Stop()
	err := hb.Push(context.Background(), time.Second)
	if !errors.Is(err, rdma.ErrFenced) || !hb.Fenced() {
		t.Fatalf("push after fencing: %v", err)
	}
}

// joinOne starts a memory node with cfg, closed when the test ends, and
// joins one member, "a", to it over memfab.
func joinOne(t *testing.T, cfg memnode.Config) (*memnode.Server, *memfab.Fabric, *memfab.Endpoint) {
	t.Helper()
	host := memnode.New(cfg)
	t.Cleanup(host.Close)
	f := memfab.New(host)
	a, err := f.Join("a")
	if err != nil {
		t.Fatal(err)
	}
	return host, f, a
}

// A deposed memory node serves nobody again: its members' verbs, new joins
// and recovery requests are all refused.
func TestDeposedNodeRefusesEverything(t *testing.T) {
	host, f, a := joinOne(t, memnode.Config{Entries: 16})
	ctx := context.Background()
	if _, err := a.FAA(ctx, a.Layout().EntryAddr(0), 1); err != nil {
		t.Fatalf("verb before deposing: %v", err)
	}
	host.Depose("a successor leads the shard")
	servesNothing(t, host, f, a, "after deposing")
}

// servesNothing checks that host refuses member a's verbs, new joins and
// recovery requests.
func servesNothing(t *testing.T, host *memnode.Server, f *memfab.Fabric, a *memfab.Endpoint, when string) {
	t.Helper()
	ctx := context.Background()
	if _, err := a.FAA(ctx, a.Layout().EntryAddr(0), 1); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("member's verb %s: %v", when, err)
	}
	if _, err := f.Join("b"); !errors.Is(err, rdma.ErrUnavailable) {
		t.Fatalf("join %s: %v", when, err)
	}
	if _, err := host.Recover(ctx, rdma.RecoverRequest{Entry: 0}); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("recovery %s: %v", when, err)
	}
}

// A member that leaves right after a beat pushed its horizon, before any
// sweep saw the beat, still holds up recovery until that horizon: a proxy
// that lost its membership leaves while its clients believe their locks.
func TestLeaveKeepsTheLastPushedHorizon(t *testing.T) {
	// Sweeps every half hour: only Leave itself can read the beat.
	host, _, a := joinOne(t, memnode.Config{Entries: 16, HeartbeatInterval: time.Hour, DeadAfter: 2 * time.Hour})
	ctx := context.Background()
	if _, err := a.FAA(ctx, a.Layout().EntryAddr(3), 1); err != nil {
		t.Fatal(err)
	}
	hb := rdma.StartHeartbeat(a, func() time.Duration { return 0 }, nil)
	if err := hb.Push(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	hb.Stop()
	_ = a.Close()
	rep, err := host.Recover(ctx, rdma.RecoverRequest{Entry: 3})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Status != rdma.RecoverNotYet || rep.RetryAfter < 25*time.Second {
		t.Fatalf("recovery of an entry the departed member may hold for 30s: %v after %v (%s)", rep.Status, rep.RetryAfter, rep.Reason)
	}
}

// A member whose newest beat publishes less than an earlier one holds up
// recovery only until the newest one's horizon: with exact beats
// (rdma.StartExactHeartbeat) a shorter beat means the longer grant was
// released. Before, the memory node kept the longest horizon it had read,
// so a lock of 30 s released at once still held recovery up for 30 s.
func TestRecoveryFollowsTheNewestBeat(t *testing.T) {
	host, _, a := joinOne(t, memnode.Config{Entries: 16, HeartbeatInterval: 10 * time.Millisecond, DeadAfter: 2 * time.Hour})
	ctx := context.Background()
	if _, err := a.FAA(ctx, a.Layout().EntryAddr(3), 1); err != nil {
		t.Fatal(err)
	}
	var horizon atomic.Int64
	horizon.Store(int64(30 * time.Second))
	hb := rdma.StartExactHeartbeat(a, func() time.Duration { return time.Duration(horizon.Load()) }, nil)
	if err := hb.Push(ctx, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // sweeps read the 30 s beat
	horizon.Store(int64(100 * time.Millisecond))
	if err := hb.Push(ctx, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	hb.Stop()
	_ = a.Close()
	rep, err := host.Recover(ctx, rdma.RecoverRequest{Entry: 3})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Status == rdma.RecoverNotYet && rep.RetryAfter > 5*time.Second {
		t.Fatalf("recovery after a 30 s beat and a newer 100 ms one: %v after %v (%s)", rep.Status, rep.RetryAfter, rep.Reason)
	}
}

// stuckStore is a state store whose saves never return, as etcd's do for a
// lease's length when the member a write went to died.
type stuckStore struct {
	release chan struct{}
	calls   chan struct{}
}

func (s *stuckStore) Update(func(*memnode.State) bool) error {
	select {
	case s.calls <- struct{}{}:
	default:
	}
	<-s.release
	return errors.New("stuck")
}

func (s *stuckStore) Get() memnode.State { return memnode.State{} }

// Liveness does not wait for saving: with every save stuck, a member that
// goes silent is still declared dead.
func TestSweepsGoOnWhileSavingHangs(t *testing.T) {
	st := &stuckStore{release: make(chan struct{}), calls: make(chan struct{}, 1)}
	host, _, a := joinOne(t, memnode.Config{Entries: 16, HeartbeatInterval: 10 * time.Millisecond, DeadAfter: 50 * time.Millisecond, Store: st})
	t.Cleanup(func() { close(st.release) }) // runs before host.Close: a hung save must end first
	// A beat with a horizon makes the next sweep save it.
	hb := rdma.StartHeartbeat(a, func() time.Duration { return time.Second }, nil)
	select {
	case <-st.calls:
	case <-time.After(30 * time.Second):
		t.Fatal("no save was attempted")
	}
	hb.Stop()
	for end := time.Now().Add(30 * time.Second); host.Admit(a.Node()) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("a silent member is still admitted 30 s on, with a save stuck")
		}
	}
}

// A beat never publishes less than the last acknowledged one promised: the
// memory node may never read the longer one, which a grant relies on, if a
// shorter one computed before it overwrites the slot first.
func TestBeatsNeverShortenThePublishedHorizon(t *testing.T) {
	_, _, a := joinOne(t, memnode.Config{Entries: 16, HeartbeatInterval: time.Hour, DeadAfter: 2 * time.Hour})
	ctx := context.Background()
	hb := rdma.StartHeartbeat(a, func() time.Duration { return 0 }, nil)
	defer hb.Stop()
	if err := hb.Push(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := hb.Push(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	slot := a.Layout().NodeSlotAddr(a.Node())
	var b [8]byte
	if err := a.Read(ctx, rdma.Addr{Region: slot.Region, Offset: slot.Offset + rdma.SlotHorizon}, b[:]); err != nil {
		t.Fatal(err)
	}
	if ms := binary.LittleEndian.Uint64(b[:]); ms < 29000 {
		t.Fatalf("the slot publishes %d ms after a 30 s beat and a 1 s one", ms)
	}
}

// An exact beat (rdma.StartExactHeartbeat) reads its horizon under the
// lock that orders beats, just before it publishes, and publishes what it
// reads, less than the last beat if that is what it reads: what a released
// lock needs. A grant that checks its cover through With, under the same
// lock, so never relies on a beat that one computed before it overwrites.
func TestExactBeatsPublishWhatTheyReadUnderTheLock(t *testing.T) {
	_, _, a := joinOne(t, memnode.Config{Entries: 16, HeartbeatInterval: time.Hour, DeadAfter: 2 * time.Hour})
	ctx := context.Background()
	var horizon atomic.Int64
	var inWith atomic.Bool
	hb := rdma.StartExactHeartbeat(a, func() time.Duration {
		if inWith.Load() {
			t.Error("a beat read its horizon while a grant checked its cover")
		}
		return time.Duration(horizon.Load())
	}, nil)
	defer hb.Stop()
	slot := a.Layout().NodeSlotAddr(a.Node())
	published := func() time.Duration {
		var b [8]byte
		if err := a.Read(ctx, rdma.Addr{Region: slot.Region, Offset: slot.Offset + rdma.SlotHorizon}, b[:]); err != nil {
			t.Fatal(err)
		}
		return time.Duration(binary.LittleEndian.Uint64(b[:])) * time.Millisecond
	}
	horizon.Store(int64(30 * time.Second))
	if err := hb.Push(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if h := published(); h < 29*time.Second {
		t.Fatalf("a beat whose horizon reads 30 s published %v", h)
	}
	horizon.Store(int64(time.Second)) // the long grant was released
	if err := hb.Push(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if h := published(); h > 2*time.Second {
		t.Fatalf("a beat whose horizon reads 1 s published %v: a released lock still counts", h)
	}
	if err := hb.Push(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if h := published(); h < 4*time.Second {
		t.Fatalf("a push of at least 5 s published %v", h)
	}

	// A beat waits for a check under way.
	checking, done := make(chan struct{}), make(chan error)
	go hb.With(func(time.Time, time.Duration, time.Duration) {
		inWith.Store(true)
		close(checking)
		time.Sleep(50 * time.Millisecond)
		inWith.Store(false)
	})
	<-checking
	go func() { done <- hb.Push(ctx, 0) }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A node past the validity Config.Valid reports serves nothing, before
// anyone has deposed it: a process that wakes from a pause must not answer
// the verbs queued for it while its keeper has yet to run.
func TestPastItsValidityServesNothing(t *testing.T) {
	var valid atomic.Bool
	valid.Store(true)
	host, f, a := joinOne(t, memnode.Config{Entries: 16, Valid: valid.Load})
	ctx := context.Background()
	if _, err := a.FAA(ctx, a.Layout().EntryAddr(0), 1); err != nil {
		t.Fatalf("verb while valid: %v", err)
	}
	valid.Store(false)
	if _, err := a.FAA(ctx, a.Layout().EntryAddr(0), 1); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("verb past the validity: %v", err)
	}
	valid.Store(true) // deposed for good, even if the validity came back
	servesNothing(t, host, f, a, "after the validity came back")
}
