package tcpfab

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/fabrictest"
	"github.com/shiftlock/shiftlock-proxy/rdma/memfab"
)

// exercise runs one of everything on a (b receives Sends) and returns what
// each party counted.
func exercise(t *testing.T, host rdma.Host, a, b rdma.Endpoint) (ca, cb, ch rdma.Snapshot) {
	t.Helper()
	ctx := testCtx(t)
	a0, b0, h0 := a.Counters().Snapshot(), b.Counters().Snapshot(), host.Counters().Snapshot()
	l := a.Layout()
	e := l.EntryAddr(10)
	buf := make([]byte, 32)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.Write(ctx, e, buf))
	must(a.Read(ctx, e, buf))
	_, err := a.CAS(ctx, e, 0, 1)
	must(err)
	_, err = a.FAA(ctx, e, 1)
	must(err)
	_, err = a.MaskedCAS64(ctx, e, 0, 0, 1, 1)
	must(err)
	_, err = a.MaskedFAA64(ctx, e, 1, 0)
	must(err)
	_, err = a.MaskedCAS128(ctx, e, rdma.U128{}, rdma.U128{}, rdma.U128{Hi: 1}, rdma.U128{Hi: 1})
	must(err)
	_, err = a.MaskedFAA128(ctx, e, rdma.U128{Hi: 1}, rdma.U128{})
	must(err)
	if _, err := a.FAA(ctx, l.EntryAddr(l.LockEntries), 1); !errors.Is(err, rdma.ErrOutOfBounds) {
		t.Fatalf("out of bounds: %v", err)
	}
	if _, err := a.FAA(ctx, rdma.Addr{Region: 77}, 1); !errors.Is(err, rdma.ErrUnknownRegion) {
		t.Fatalf("unknown region: %v", err)
	}
	var bt rdma.Batch
	bt.Write(e, buf[:16])
	bt.FAA(e, 1)
	bt.Read(rdma.Addr{Region: 77}, buf[:8])
	bt.MaskedFAA128(l.EntryAddr(l.LockEntries), rdma.U128{}, rdma.U128{})
	must(a.Post(ctx, &bt))
	if _, err := a.Control().Peers(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := a.Control().Recover(ctx, rdma.RecoverRequest{Entry: 11})
	must(err)
	if rep.Status != rdma.RecoverStale {
		t.Fatalf("recovery of a free entry: %+v", rep)
	}
	var ib rdma.Inbox
	tgt, _, _ := ib.Open()
	if err := a.Send(ctx, b.Node(), tgt, rdma.Payload{}); !errors.Is(err, rdma.ErrNotReady) {
		t.Fatalf("send before bind: %v", err)
	}
	b.Bind(ib.Deliver)
	must(a.Send(ctx, b.Node(), tgt, rdma.Payload{1}))
	if err := a.Send(ctx, b.Node(), tgt+1, rdma.Payload{}); !errors.Is(err, rdma.ErrNotReady) {
		t.Fatalf("send to a closed target: %v", err)
	}
	a.Bind(ib.Deliver)
	must(a.Send(ctx, a.Node(), tgt, rdma.Payload{2}))
	return a.Counters().Snapshot().Sub(a0), b.Counters().Snapshot().Sub(b0), host.Counters().Snapshot().Sub(h0)
}

// TestCountersMatchMemfab runs the same operations on both fabrics and
// requires identical counts on the initiator, the receiver and the memory
// node.
func TestCountersMatchMemfab(t *testing.T) {
	cfg := memnode.Config{Entries: 64, DeadAfter: time.Minute}
	mh := memnode.New(cfg)
	t.Cleanup(mh.Close)
	mf := memfab.New(mh)
	ma, _ := mf.Join("a")
	mb, _ := mf.Join("b")
	wantA, wantB, wantH := exercise(t, mh, ma, mb)

	ts := startServer(t, cfg)
	ta, tb := dial(t, ts.addr, "a"), dial(t, ts.addr, "b")
	gotA, gotB, gotH := exercise(t, ts.host, ta, tb)
	for _, c := range []struct {
		who       string
		got, want rdma.Snapshot
	}{{"initiator", gotA, wantA}, {"receiver", gotB, wantB}, {"memory node", gotH, wantH}} {
		if c.got != c.want {
			t.Errorf("%s counted\n out %v in %v\nmemfab counts\n out %v in %v", c.who, c.got.Out, c.got.In, c.want.Out, c.want.In)
		}
	}
	if wantH.In[rdma.VerbBatch] == 0 || wantA.Out[rdma.VerbSend] != 3 {
		t.Fatalf("the exercise counted too little to compare: %+v", wantA)
	}
}

func TestProbe(t *testing.T) {
	ts := startServer(t, memnode.Config{Entries: 64, DeadAfter: time.Minute})
	a := dial(t, ts.addr, "a")
	ctx := testCtx(t)
	if h, err := ts.srv.Probe(ctx, a.Node(), 3); err != nil || h != rdma.HoldActive {
		t.Fatalf("probe without a handler: %v %v, want active", h, err)
	}
	a.BindProbe(func(entry uint64) rdma.Hold { return rdma.Hold(entry % 3) })
	for entry, want := range []rdma.Hold{rdma.HoldNone, rdma.HoldWaiting, rdma.HoldActive, rdma.HoldNone} {
		if h, err := ts.srv.Probe(ctx, a.Node(), uint64(entry)); err != nil || h != want {
			t.Fatalf("probe of entry %d: %v %v, want %v", entry, h, err, want)
		}
	}
	// Probes are answered while the node is busy with verbs, too.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := a.FAA(ctx, a.Layout().EntryAddr(1), 1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := 0; i < 50; i++ {
		if h, err := ts.srv.Probe(ctx, a.Node(), 4); err != nil || h != rdma.HoldWaiting {
			t.Fatalf("probe under load: %v %v", h, err)
		}
	}
	close(stop)
	wg.Wait()
	if _, err := ts.srv.Probe(ctx, 999, 1); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("probe of an unknown node: %v", err)
	}
	a.Close()
	if _, err := ts.srv.Probe(ctx, a.Node(), 1); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("probe of a departed node: %v", err)
	}
}

// TestRecover drives an era-guarded reset end to end: the memory node probes
// both members over their own connections (the requester's while its
// Recover call is outstanding on it).
func TestRecover(t *testing.T) {
	ts := startServer(t, memnode.Config{Entries: 64, DeadAfter: time.Minute})
	a, b := dial(t, ts.addr, "a"), dial(t, ts.addr, "b")
	ctx := testCtx(t)
	l := a.Layout()
	const entry = 7
	var w [16]byte
	rdma.U128{Lo: 5<<40 | 3, Hi: 100}.PutBytes(w[:])
	if err := a.Write(ctx, l.EntryAddr(entry), w[:]); err != nil {
		t.Fatal(err)
	}
	era := func() uint64 {
		var e [8]byte
		if err := b.Read(ctx, l.EraAddr(entry), e[:]); err != nil {
			t.Fatal(err)
		}
		return rdma.U128From(append(e[:], make([]byte, 8)...)).Lo
	}
	e0 := era()
	var bAsked sync.WaitGroup
	bAsked.Add(1)
	var once sync.Once
	b.BindProbe(func(uint64) rdma.Hold { once.Do(bAsked.Done); return rdma.HoldNone })
	a.BindProbe(func(uint64) rdma.Hold { return rdma.HoldActive })
	rep, err := a.Control().Recover(ctx, rdma.RecoverRequest{Entry: entry, Era: e0})
	if err != nil || rep.Status != rdma.RecoverRefused {
		t.Fatalf("recovery while a member holds the entry: %+v %v", rep, err)
	}
	a.BindProbe(func(uint64) rdma.Hold { return rdma.HoldWaiting })
	rep, err = a.Control().Recover(ctx, rdma.RecoverRequest{Entry: entry, Era: e0})
	if err != nil || rep.Status != rdma.RecoverDone || rep.Era != e0+1 {
		t.Fatalf("recovery: %+v %v", rep, err)
	}
	bAsked.Wait()
	var got [16]byte
	if err := b.Read(ctx, l.EntryAddr(entry), got[:]); err != nil {
		t.Fatal(err)
	}
	if v := rdma.U128From(got[:]); v != (rdma.U128{Lo: 0, Hi: 100 + rdma.RecoveryLeap}) {
		t.Fatalf("entry after recovery: %v", v)
	}
	if era() != e0+1 {
		t.Fatal("era not bumped")
	}
	rep, err = a.Control().Recover(ctx, rdma.RecoverRequest{Entry: entry, Era: e0})
	if err != nil || rep.Status != rdma.RecoverStale {
		t.Fatalf("second recovery with the old era: %+v %v", rep, err)
	}
}

// TestFenced: a node that stops heartbeating is declared dead, and its
// verbs fail as fenced, while a heartbeating node carries on.
func TestFenced(t *testing.T) {
	// The silent node is waited for; the deadline only has to be one that a
	// loaded host's beat gaps never reach.
	ts := startServer(t, memnode.Config{Entries: 64, HeartbeatInterval: 20 * time.Millisecond, DeadAfter: 2 * time.Second})
	live, silent := dial(t, ts.addr, "live"), dial(t, ts.addr, "silent")
	hb := rdma.StartHeartbeat(live, func() time.Duration { return 0 }, nil)
	defer hb.Stop()
	for ts.host.Admit(silent.Node()) == nil {
		time.Sleep(10 * time.Millisecond)
	}
	ctx := testCtx(t)
	_, err := silent.FAA(ctx, silent.Layout().EntryAddr(1), 1)
	if !errors.Is(err, rdma.ErrFenced) || !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("fenced node's verb: %v", err)
	}
	var b rdma.Batch
	b.FAA(silent.Layout().EntryAddr(1), 1)
	if err := silent.Post(ctx, &b); !errors.Is(err, rdma.ErrFenced) {
		t.Fatalf("fenced node's batch: %v", err)
	}
	if _, err := silent.Control().Recover(ctx, rdma.RecoverRequest{Entry: 1}); !errors.Is(err, rdma.ErrFenced) {
		t.Fatalf("fenced node's recovery: %v", err)
	}
	if err := hb.Push(ctx, 0); err != nil {
		t.Fatalf("live node's heartbeat: %v", err)
	}
	mustFAA(t, live, 1, 0)
}

func TestLargeReadWrite(t *testing.T) {
	ts := startServer(t, memnode.Config{Entries: 1 << 14})
	a, b := dial(t, ts.addr, "a"), dial(t, ts.addr, "b")
	ctx := testCtx(t)
	data := make([]byte, 200<<10) // larger than the read buffers on both ends
	for i := range data {
		data[i] = byte(i*31 + i>>8)
	}
	addr := a.Layout().EntryAddr(16)
	if err := a.Write(ctx, addr, data); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := b.Read(ctx, addr, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("large read differs from the write")
	}
	var bt rdma.Batch
	half := make([]byte, len(data)/2)
	bt.Read(addr, half)
	i := bt.FAA(a.Layout().EntryAddr(0), 1)
	if err := b.Post(ctx, &bt); err != nil || bt.FirstErr() != nil {
		t.Fatal(err, bt.FirstErr())
	}
	if !bytes.Equal(half, data[:len(half)]) || bt.Old64(i) != 0 {
		t.Fatal("large batch read differs")
	}
	if err := a.Write(ctx, addr, make([]byte, MaxFrame)); !errors.Is(err, rdma.ErrBadRequest) {
		t.Fatalf("write bigger than a frame: %v", err)
	}
	bt.Reset()
	bt.Read(addr, make([]byte, MaxFrame/2))
	bt.Read(addr, make([]byte, MaxFrame/2))
	if err := a.Post(ctx, &bt); !errors.Is(err, rdma.ErrBadRequest) {
		t.Fatalf("batch whose replies exceed a frame: %v", err)
	}
	mustFAA(t, a, 0, 1)
}

func TestClose(t *testing.T) {
	ts := startServer(t, memnode.Config{Entries: 64})
	a, b := dial(t, ts.addr, "a"), dial(t, ts.addr, "b")
	ctx := testCtx(t)
	node := a.Node()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := a.FAA(ctx, a.Layout().EntryAddr(0), 1); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("verb after close: %v", err)
	}
	if err := a.Post(ctx, &rdma.Batch{}); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("post after close: %v", err)
	}
	if err := a.Send(ctx, b.Node(), 1, rdma.Payload{}); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
	if _, err := a.Control().Peers(ctx); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("control after close: %v", err)
	}
	// Close left: the memory node fenced the ID at once.
	if err := ts.host.Admit(node); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("closed node still admitted: %v", err)
	}
	mustFAA(t, b, 0, 0)
}

// TestServerGone: when the memory node goes away, pending and later verbs
// fail with ErrUnreachable; the endpoint does not reconnect.
func TestServerGone(t *testing.T) {
	ts := startServer(t, memnode.Config{Entries: 64})
	a := dial(t, ts.addr, "a")
	ctx := testCtx(t)
	mustFAA(t, a, 0, 0)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := a.FAA(ctx, a.Layout().EntryAddr(1), 1); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	ts.srv.Close()
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, rdma.ErrUnreachable) {
			t.Fatalf("verb when the memory node went away: %v", err)
		}
	}
	if _, err := a.FAA(ctx, a.Layout().EntryAddr(1), 1); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("verb after the memory node went away: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestDialFailures(t *testing.T) {
	ctx := testCtx(t)
	ts := startServer(t, memnode.Config{Entries: 64})
	addr := ts.addr
	ts.srv.Close()
	if _, err := Dial(ctx, addr, Config{}); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("dial of a closed port: %v", err)
	}
	ts2 := startServer(t, memnode.Config{Entries: 64, GraceUntil: time.Now().Add(time.Hour)})
	if _, err := Dial(ctx, ts2.addr, Config{}); !errors.Is(err, rdma.ErrUnavailable) {
		t.Fatalf("dial during restart grace: %v", err)
	}
	if _, err := Dial(ctx, ts2.addr, Config{PeerListen: "256.0.0.1:0"}); err == nil {
		t.Fatal("bad peer listen address accepted")
	}
}

func TestManyOutstanding(t *testing.T) {
	ts := startServer(t, memnode.Config{Entries: 1024})
	eps := []*Endpoint{dial(t, ts.addr, "a"), dial(t, ts.addr, "b")}
	const goroutines, iters = 64, 200
	fabrictest.Concurrently(t, goroutines, func(g int) error {
		ep := eps[g%2]
		ctx := context.Background()
		mine := ep.Layout().EntryAddr(uint64(100 + g))
		shared := ep.Layout().EntryAddr(1)
		for i := 0; i < iters; i++ {
			// A private entry checks each reply reaches its own caller.
			if old, err := ep.FAA(ctx, mine, 1); err != nil || old != uint64(i) {
				return errors.Join(err, errors.New("private counter out of step"))
			}
			var b rdma.Batch
			b.MaskedFAA128(shared, rdma.U128{Lo: 1, Hi: 1}, rdma.U128{Lo: 1 << 63})
			if err := ep.Post(ctx, &b); err != nil || b.FirstErr() != nil {
				return errors.Join(err, b.FirstErr())
			}
		}
		return nil
	})
	var buf [16]byte
	if err := eps[0].Read(testCtx(t), eps[0].Layout().EntryAddr(1), buf[:]); err != nil {
		t.Fatal(err)
	}
	if v := rdma.U128From(buf[:]); v != (rdma.U128{Lo: goroutines * iters, Hi: goroutines * iters}) {
		t.Fatalf("lost updates: %v, want %d in both words", v, goroutines*iters)
	}
}

// TestServeContext: the package-level Serve stops when its context ends,
// closing its members' connections, and returns nil.
func TestServeContext(t *testing.T) {
	host := memnode.New(memnode.Config{Entries: 64})
	t.Cleanup(host.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, host, nil) }()
	a := dial(t, ln.Addr().String(), "a")
	mustFAA(t, a, 0, 0)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after its context ended: %v", err)
	}
	if _, err := a.FAA(testCtx(t), a.Layout().EntryAddr(0), 1); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("verb after the server stopped: %v", err)
	}
}

// TestBatchOddVerbs: a batch holding something that is not a memory verb
// fails that verb alone, and a 16-byte flag on a read is ignored, as in
// memfab.
func TestBatchOddVerbs(t *testing.T) {
	mh := memnode.New(memnode.Config{Entries: 64})
	t.Cleanup(mh.Close)
	me, _ := memfab.New(mh).Join("m")
	ts := startServer(t, memnode.Config{Entries: 64})
	te := dial(t, ts.addr, "t")
	for _, ep := range []rdma.Endpoint{me, te} {
		var b rdma.Batch
		i1 := b.FAA(ep.Layout().EntryAddr(2), 5)
		b.Ops = append(b.Ops, rdma.Op{Verb: rdma.VerbSend, Addr: ep.Layout().EntryAddr(2)})
		rd := make([]byte, 8)
		b.Ops = append(b.Ops, rdma.Op{Verb: rdma.VerbRead, Wide: true, Addr: ep.Layout().EntryAddr(2), Buf: rd})
		if err := ep.Post(testCtx(t), &b); err != nil {
			t.Fatalf("%T: %v", ep, err)
		}
		if b.Err(i1) != nil || !errors.Is(b.Err(1), rdma.ErrBadRequest) || b.Err(2) != nil || rd[0] != 5 {
			t.Fatalf("%T: results %v %v %v read %x", ep, b.Err(i1), b.Err(1), b.Err(2), rd)
		}
	}
}
