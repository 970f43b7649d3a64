package membership

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/ha"
	"github.com/shiftlock/shiftlock-proxy/lockmap"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// cluster is one in-process memory node whose members heartbeat every
// 20 ms and are declared dead after 300 ms of silence.
func cluster(t *testing.T) *memfab.Fabric {
	t.Helper()
	host := memnode.New(memnode.Config{Entries: 64, HeartbeatInterval: 20 * time.Millisecond, DeadAfter: 300 * time.Millisecond})
	t.Cleanup(host.Close)
	return memfab.New(host)
}

// joins is a Join that records every endpoint it made, and fails while
// refuse is above zero (counting down), as a memory node in its restart
// grace refuses.
type joins struct {
	fab    *memfab.Fabric
	mu     sync.Mutex
	eps    []*memfab.Endpoint
	calls  atomic.Int32
	refuse atomic.Int32
}

func (j *joins) join(context.Context) (rdma.Endpoint, error) {
	j.calls.Add(1)
	if j.refuse.Add(-1) >= 0 {
		return nil, fmt.Errorf("%w: in its restart grace", rdma.ErrUnavailable)
	}
	ep, err := j.fab.Join("proxy")
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	j.eps = append(j.eps, ep)
	j.mu.Unlock()
	return ep, nil
}

func (j *joins) last() *memfab.Endpoint {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.eps[len(j.eps)-1]
}

// replacer hands each new domain to the map and tells the test.
type replacer struct {
	m    *lockmap.Map
	lost chan int
}

func (r *replacer) Replace(i int, d *lockmap.Domain) (int, error) {
	lost, err := r.m.Replace(i, d)
	r.lost <- lost
	return lost, err
}

func supervised(t *testing.T, mb *Member) (*lockmap.Map, chan int) {
	t.Helper()
	if err := JoinAll(context.Background(), []*Member{mb}); err != nil {
		t.Fatal(err)
	}
	m := lockmap.New([]*lockmap.Domain{mb.Dom}, lockmap.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	r := &replacer{m: m, lost: make(chan int, 4)}
	done := make(chan struct{})
	go func() { mb.Supervise(ctx, r, func() {}); close(done) }()
	t.Cleanup(func() { cancel(); <-done; m.Close(); mb.Close() })
	return m, r.lost
}

func awaitRejoin(t *testing.T, lost chan int) int {
	t.Helper()
	select {
	case n := <-lost:
		return n
	case <-time.After(20 * time.Second):
		t.Fatal("no rejoin")
		return 0
	}
}

// TestSuperviseRejoinsADeadMembership: a membership the memory node stops
// hearing from (the proxy's endpoint vanishes, as after a partition) is
// replaced by a new one, the holds of the old one are reported lost, and
// the lock table works on the new one.
func TestSuperviseRejoinsADeadMembership(t *testing.T) {
	j := &joins{fab: cluster(t)}
	mb := &Member{Name: "mem", Join: j.join, Config: shiftlock.Config{}, Log: zap.NewNop()}
	m, lost := supervised(t, mb)
	ctx := context.Background()
	excl := lockmap.AcquireOptions{Mode: shiftlock.Exclusive}
	if _, ok, err := m.AcquireKey(ctx, "held", "a", excl); !ok || err != nil {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	old := mb.Dom
	j.last().Kill()
	if n := awaitRejoin(t, lost); n != 1 {
		t.Errorf("lost %d holds with the old membership, want 1", n)
	}
	if mb.Dom == old || j.calls.Load() != 2 {
		t.Fatalf("domain replaced: %v, joins: %d", mb.Dom != old, j.calls.Load())
	}
	if _, ok, err := m.AcquireKey(ctx, "other", "b", excl); !ok || err != nil {
		t.Fatalf("acquire on the new membership: %v %v", ok, err)
	}
}

// TestSuperviseRetriesRefusedJoins: a memory node that refuses joins (its
// restart grace) is asked again until it admits the proxy.
func TestSuperviseRetriesRefusedJoins(t *testing.T) {
	j := &joins{fab: cluster(t)}
	mb := &Member{Name: "mem", Join: j.join, Log: zap.NewNop()}
	_, lost := supervised(t, mb)
	j.refuse.Store(3)
	j.last().Kill()
	awaitRejoin(t, lost)
	if n := j.calls.Load(); n != 5 { // the first join, three refusals, the rejoin
		t.Fatalf("joins: %d, want 5", n)
	}
}

// follower is a shard record that the test changes, as etcd would.
type follower struct {
	mu  sync.Mutex
	rec ha.Record
	ch  chan struct{}
}

func (f *follower) Current() (ha.Record, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rec, f.rec.Active != ""
}

func (f *follower) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ch
}

func (f *follower) set(rec ha.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rec = rec
	close(f.ch)
	f.ch = make(chan struct{})
}

func rec(active string, gen uint64) ha.Record {
	r := ha.Record{Active: active}
	r.Generation = gen
	return r
}

// TestSupersededShardRejoins: when etcd names another memory node for the
// shard, the proxy leaves the old one at once, without waiting for its
// heartbeats to fail, and joins the one named; it stays there.
func TestSupersededShardRejoins(t *testing.T) {
	j := &joins{fab: cluster(t)}
	f := &follower{rec: rec("node-1", 1), ch: make(chan struct{})}
	mb := &Member{Name: "shard", Log: zap.NewNop(), Follow: f}
	mb.Join = func(ctx context.Context) (rdma.Endpoint, error) {
		rec, _ := f.Current()
		ep, err := j.join(ctx)
		if err == nil {
			mb.Joined(rec)
		}
		return ep, err
	}
	_, lost := supervised(t, mb)
	time.Sleep(200 * time.Millisecond)
	if n := j.calls.Load(); n != 1 {
		t.Fatalf("joins before the record changed: %d", n)
	}
	f.set(rec("node-2", 2))
	awaitRejoin(t, lost)
	time.Sleep(200 * time.Millisecond)
	if n := j.calls.Load(); n != 2 {
		t.Fatalf("joins: %d, want 2 (one for each record)", n)
	}
	if mb.superseded() != nil {
		t.Fatalf("still superseded: %v", mb.superseded())
	}
}

// TestJoinAllWaitsOutGraceOnly: at startup a refusal during a restart grace
// is retried; any other error, and a fabric refused as open, end the start,
// even for a shard, whose unreachable memory node is otherwise retried.
func TestJoinAllWaitsOutGraceOnly(t *testing.T) {
	j := &joins{fab: cluster(t)}
	j.refuse.Store(2)
	mb := &Member{Name: "mem", Join: j.join, Log: zap.NewNop()}
	if err := JoinAll(context.Background(), []*Member{mb}); err != nil || j.calls.Load() != 3 {
		t.Fatalf("JoinAll = %v after %d joins, want nil after 3", err, j.calls.Load())
	}
	defer mb.Close()

	boom := errors.New("no such host")
	calls := 0
	bad := &Member{Name: "bad", Log: zap.NewNop(), Join: func(context.Context) (rdma.Endpoint, error) { calls++; return nil, boom }}
	if err := JoinAll(context.Background(), []*Member{bad}); !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("JoinAll = %v after %d joins, want the error at once", err, calls)
	}

	calls = 0
	open := &Member{Name: "open", Log: zap.NewNop(), Follow: &follower{ch: make(chan struct{})},
		Join: func(context.Context) (rdma.Endpoint, error) {
			calls++
			return nil, fmt.Errorf("%w: shard s: memory node 10.0.0.1:7300 is across the network", ErrOpenFabric)
		}}
	if err := JoinAll(context.Background(), []*Member{open}); !errors.Is(err, ErrOpenFabric) || calls != 1 {
		t.Fatalf("JoinAll = %v after %d joins, want ErrOpenFabric at once", err, calls)
	}
}
