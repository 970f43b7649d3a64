// Package fabrictest is the conformance suite every fabric must pass. A
// fabric's tests call Run with a function that joins a fresh node; the suite
// then checks every verb against the rdma package's reference semantics, the
// ordering and concurrency guarantees, Send delivery, and the error cases.
package fabrictest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// Join attaches one more node to the same memory node.
type Join func(t *testing.T, name string) rdma.Endpoint

// An Option adjusts how Run runs the suite.
type Option func(*suite)

// Deadlines stretches the suite's deadlines on work (each subtest's
// context, 20 s, and the wait for one Send's delivery, 5 s) by scale. They
// only stop a hung fabric and assert no speed; a fabric whose tests run
// under emulation (verbs on soft-RoCE in a TCG guest, many times slower on
// a loaded host) passes a scale so that slowness is not taken for a hang,
// while memfab and tcpfab keep the native bounds.
func Deadlines(scale func(time.Duration) time.Duration) Option {
	return func(s *suite) { s.scale = scale }
}

type suite struct {
	scale func(time.Duration) time.Duration
}

func (s suite) bound(d time.Duration) time.Duration {
	if s.scale == nil {
		return d
	}
	return s.scale(d)
}

// Run runs the whole suite.
func Run(t *testing.T, join Join, opts ...Option) {
	var s suite
	for _, o := range opts {
		o(&s)
	}
	t.Run("Layout", func(t *testing.T) { s.testLayout(t, join) })
	t.Run("ReadWrite", func(t *testing.T) { s.testReadWrite(t, join) })
	t.Run("Atomics", func(t *testing.T) { s.testAtomics(t, join) })
	t.Run("MaskedFAAConcurrent", func(t *testing.T) { s.testMaskedFAAConcurrent(t, join) })
	t.Run("Batch", func(t *testing.T) { s.testBatch(t, join) })
	t.Run("Send", func(t *testing.T) { s.testSend(t, join) })
	t.Run("Errors", func(t *testing.T) { s.testErrors(t, join) })
	t.Run("Probe", func(t *testing.T) { s.testProbe(t, join) })
}

// Concurrently runs f(0), ..., f(n-1), each on a goroutine of its own,
// and once all have returned fails t with the first error any returned:
// the shape of a fabric's concurrency tests, whose goroutines may not call
// t.Fatal themselves.
func Concurrently(t testing.TB, n int, f func(g int) error) {
	t.Helper()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(g); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func (s suite) ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), s.bound(20*time.Second))
	t.Cleanup(cancel)
	return c
}

// scratch picks an entry no other subtest uses, so the suite can share one
// memory node.
var (
	scratchMu   sync.Mutex
	scratchNext uint64 = 1000
)

func scratch(n uint64) uint64 {
	scratchMu.Lock()
	defer scratchMu.Unlock()
	e := scratchNext
	scratchNext += n
	return e
}

func (s suite) testLayout(t *testing.T, join Join) {
	a, b := join(t, "a"), join(t, "b")
	if a.Node() == 0 || b.Node() == 0 || a.Node() == b.Node() {
		t.Fatalf("node IDs must be distinct and non-zero: %d %d", a.Node(), b.Node())
	}
	l := a.Layout()
	if l.LockEntries == 0 || l.EraCount == 0 || l.Generation == 0 {
		t.Fatalf("incomplete layout: %+v", l)
	}
	peers, err := a.Control().Peers(s.ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[rdma.NodeID]bool{}
	for _, p := range peers {
		seen[p.Node] = true
	}
	if !seen[a.Node()] || !seen[b.Node()] {
		t.Fatalf("address book %v lacks %d or %d", peers, a.Node(), b.Node())
	}
}

func (s suite) testReadWrite(t *testing.T, join Join) {
	a, b := join(t, "a"), join(t, "b")
	c := s.ctx(t)
	e := scratch(4)
	addr := a.Layout().EntryAddr(e)
	data := make([]byte, 64)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := a.Write(c, addr, data); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64)
	if err := b.Read(c, addr, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(data) {
		t.Fatalf("read back %x, wrote %x", got, data)
	}
}

func (s suite) testAtomics(t *testing.T, join Join) {
	a := join(t, "a")
	c := s.ctx(t)
	r := rand.New(rand.NewPCG(7, 8))
	e := scratch(1)
	addr := a.Layout().EntryAddr(e)
	word := addr
	// Model the entry locally and check every verb's old value and effect.
	var model rdma.U128
	read := func() rdma.U128 {
		var buf [16]byte
		if err := a.Read(c, addr, buf[:]); err != nil {
			t.Fatal(err)
		}
		return rdma.U128From(buf[:])
	}
	model = read()
	for i := 0; i < 400; i++ {
		x := rdma.U128{Lo: r.Uint64(), Hi: r.Uint64()}
		m := rdma.U128{Lo: r.Uint64(), Hi: r.Uint64()}
		var old rdma.U128
		var err error
		want := model
		switch i % 6 {
		case 0:
			old.Lo, err = a.CAS(c, word, model.Lo, x.Lo)
			want.Lo = x.Lo
		case 1:
			old.Lo, err = a.FAA(c, word, x.Lo)
			want.Lo = model.Lo + x.Lo
		case 2:
			cmp := model
			if r.IntN(2) == 0 {
				cmp = x
			}
			old.Lo, err = a.MaskedCAS64(c, word, cmp.Lo, m.Lo, x.Lo, ^m.Lo)
			want.Lo, _ = rdma.ApplyMaskedCAS64(model.Lo, cmp.Lo, m.Lo, x.Lo, ^m.Lo)
		case 3:
			old.Lo, err = a.MaskedFAA64(c, word, x.Lo, m.Lo)
			want.Lo = rdma.ApplyMaskedFAA64(model.Lo, x.Lo, m.Lo)
		case 4:
			cmp, cm := model, m
			if r.IntN(3) == 0 {
				cm = rdma.U128{} // fetch-and-store
			} else if r.IntN(2) == 0 {
				cmp = x
			}
			old, err = a.MaskedCAS128(c, addr, cmp, cm, x, m.Not())
			want, _ = rdma.ApplyMaskedCAS(model, cmp, cm, x, m.Not())
		case 5:
			old, err = a.MaskedFAA128(c, addr, x, m)
			want = rdma.ApplyMaskedFAA(model, x, m)
		}
		if err != nil {
			t.Fatalf("verb %d: %v", i, err)
		}
		if i%6 < 4 {
			if old.Lo != model.Lo {
				t.Fatalf("verb %d returned old %#x, memory held %#x", i, old.Lo, model.Lo)
			}
		} else if old != model {
			t.Fatalf("verb %d returned old %v, memory held %v", i, old, model)
		}
		model = want
		if got := read(); got != model {
			t.Fatalf("after verb %d memory is %v, want %v", i, got, model)
		}
	}
}

// testMaskedFAAConcurrent hammers one entry from many goroutines on several
// nodes with field-wise adds and checks that no update was lost.
func (s suite) testMaskedFAAConcurrent(t *testing.T, join Join) {
	const nodes, perNode, iters = 3, 16, 300
	cnt, rel := rdma.NewField(40, 23), rdma.NewField(64, 64)
	boundary := rdma.Boundary(cnt, rel)
	e := scratch(1)
	eps := make([]rdma.Endpoint, nodes)
	for n := range eps {
		eps[n] = join(t, "faa")
	}
	Concurrently(t, nodes*perNode, func(g int) error {
		ep := eps[g/perNode]
		c := context.Background()
		addr := ep.Layout().EntryAddr(e)
		for i := 0; i < iters; i++ {
			if _, err := ep.MaskedFAA128(c, addr, cnt.Value(1).Or(rel.Value(1)), boundary); err != nil {
				return err
			}
			if _, err := ep.MaskedFAA128(c, addr, cnt.Neg(1), boundary); err != nil {
				return err
			}
		}
		return nil
	})
	first := eps[0]
	var buf [16]byte
	if err := first.Read(s.ctx(t), first.Layout().EntryAddr(e), buf[:]); err != nil {
		t.Fatal(err)
	}
	v := rdma.U128From(buf[:])
	if cnt.Get(v) != 0 || rel.Get(v) != nodes*perNode*iters {
		t.Fatalf("lost updates: counter %d (want 0), total %d (want %d)", cnt.Get(v), rel.Get(v), nodes*perNode*iters)
	}
}

func (s suite) testBatch(t *testing.T, join Join) {
	a := join(t, "a")
	c := s.ctx(t)
	e := scratch(2)
	addr := a.Layout().EntryAddr(e)
	before := a.Counters().Snapshot()
	var b rdma.Batch
	b.Write(addr, make([]byte, 32))
	i1 := b.FAA(addr, 5)
	i2 := b.FAA(addr, 5) // must see the first FAA: in-order completion
	i3 := b.MaskedCAS128(rdma.Addr{Region: addr.Region, Offset: addr.Offset + 16}, rdma.U128{}, rdma.U128{}, rdma.U128{Lo: 1, Hi: 2}, rdma.U128{Lo: ^uint64(0), Hi: ^uint64(0)})
	rd := make([]byte, 32)
	i4 := b.Read(addr, rd)
	i5 := b.Read(rdma.Addr{Region: 99}, make([]byte, 8))
	if err := a.Post(c, &b); err != nil {
		t.Fatal(err)
	}
	if b.Old64(i1) != 0 || b.Old64(i2) != 5 || b.Old(i3) != (rdma.U128{}) || b.Err(i4) != nil {
		t.Fatalf("batch results: %d %d %v %v", b.Old64(i1), b.Old64(i2), b.Old(i3), b.Err(i4))
	}
	if got := rdma.U128From(rd[16:]); got != (rdma.U128{Lo: 1, Hi: 2}) || rdma.U128From(rd).Lo != 10 {
		t.Fatalf("batch read saw %x", rd)
	}
	if !errors.Is(b.Err(i5), rdma.ErrUnknownRegion) {
		t.Fatalf("bad verb in batch: %v", b.Err(i5))
	}
	d := a.Counters().Snapshot().Sub(before)
	if d.Out[rdma.VerbBatch] != 1 || d.Out[rdma.VerbFAA] != 2 || d.Out[rdma.VerbRead] < 1 {
		t.Fatalf("batch counters: %+v", d.Out)
	}
}

func (s suite) testSend(t *testing.T, join Join) {
	a, b := join(t, "a"), join(t, "b")
	c := s.ctx(t)
	var ib rdma.Inbox
	tgt, ch, _ := ib.Open()
	if err := a.Send(c, b.Node(), tgt, rdma.Payload{1}); !errors.Is(err, rdma.ErrNotReady) {
		t.Fatalf("send before Bind: %v, want ErrNotReady", err)
	}
	b.Bind(ib.Deliver)
	before := b.Counters().Snapshot()
	const n = 200
	for i := 0; i < n; i++ {
		p := rdma.Payload{byte(i), byte(i >> 8)}
		if err := a.Send(c, b.Node(), tgt, p); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-ch:
			if m.From != a.Node() || m.To != tgt || m.Payload != p {
				t.Fatalf("got %+v", m)
			}
		case <-time.After(s.bound(5 * time.Second)):
			t.Fatal("message not delivered")
		}
	}
	if d := b.Counters().Snapshot().Sub(before); d.In[rdma.VerbSend] != n {
		t.Fatalf("receiver counted %d inbound sends, want %d", d.In[rdma.VerbSend], n)
	}
	// A closed target refuses: the sender learns it, nothing is delivered.
	// The Send still counts, on both sides, as one that reached the
	// receiver's handler: the counters say what crossed the fabric, which
	// a refusal does as much as an acceptance (a Handover to a slot that
	// gave up waiting; issue 36's 84 Sends against 85 on verbs).
	ib.Close(tgt)
	outA, inB := a.Counters().Snapshot(), b.Counters().Snapshot()
	if err := a.Send(c, b.Node(), tgt, rdma.Payload{}); !errors.Is(err, rdma.ErrNotReady) {
		t.Fatalf("send to closed target: %v", err)
	}
	if o, i := a.Counters().Snapshot().Sub(outA).Out[rdma.VerbSend], b.Counters().Snapshot().Sub(inB).In[rdma.VerbSend]; o != 1 || i != 1 {
		t.Fatalf("a Send its target refused counted %d out at the sender and %d in at the receiver, want 1 and 1", o, i)
	}
	// Sending to oneself works.
	a.Bind(ib.Deliver)
	t2, ch2, _ := ib.Open()
	if err := a.Send(c, a.Node(), t2, rdma.Payload{9}); err != nil {
		t.Fatal(err)
	}
	if m := <-ch2; m.Payload[0] != 9 {
		t.Fatal("self send")
	}
	// A node that left is unreachable.
	dead := b.Node()
	b.Close()
	if err := a.Send(c, dead, tgt, rdma.Payload{}); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("send to departed node: %v", err)
	}
	if err := a.Send(c, 65000, tgt, rdma.Payload{}); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("send to unknown node: %v", err)
	}
}

func (s suite) testErrors(t *testing.T, join Join) {
	a := join(t, "a")
	c := s.ctx(t)
	l := a.Layout()
	end := rdma.Addr{Region: rdma.RegionLocks, Offset: l.LockEntries * 16}
	if err := a.Read(c, end, make([]byte, 8)); !errors.Is(err, rdma.ErrOutOfBounds) {
		t.Errorf("read past end: %v", err)
	}
	if _, err := a.MaskedCAS128(c, rdma.Addr{Region: rdma.RegionLocks, Offset: 8}, rdma.U128{}, rdma.U128{}, rdma.U128{}, rdma.U128{}); !errors.Is(err, rdma.ErrMisaligned) {
		t.Errorf("misaligned 16-byte atomic: %v", err)
	}
	if _, err := a.FAA(c, rdma.Addr{Region: 77}, 1); !errors.Is(err, rdma.ErrUnknownRegion) {
		t.Errorf("unknown region: %v", err)
	}
	if err := a.Write(c, rdma.Addr{Region: rdma.RegionLocks, Offset: 3}, make([]byte, 8)); !errors.Is(err, rdma.ErrMisaligned) {
		t.Errorf("misaligned write: %v", err)
	}
	// The endpoint keeps working after bad requests.
	if _, err := a.FAA(c, l.EntryAddr(scratch(1)), 1); err != nil {
		t.Fatalf("endpoint broken by bad requests: %v", err)
	}
	a.Close()
	if _, err := a.FAA(c, l.EntryAddr(0), 1); !errors.Is(err, rdma.ErrClosed) && !errors.Is(err, rdma.ErrUnreachable) {
		t.Errorf("verb after Close: %v", err)
	}
}

func (s suite) testProbe(t *testing.T, join Join) {
	a := join(t, "a")
	a.BindProbe(func(entry uint64) rdma.Hold {
		if entry == 42 {
			return rdma.HoldActive
		}
		return rdma.HoldNone
	})
	_ = a
	// The probe is driven by the memory node during recovery; fabrics that
	// expose their Prober are checked by their own tests.
}
