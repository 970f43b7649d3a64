//go:build verbs

package verbs_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/fabrictest"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
	"github.com/shiftlock/shiftlock-proxy/rdma/verbs"
)

// DeviceEnv names the RDMA device the tests use; make test-verbs sets it to
// the guest's soft-RoCE device. A verbs build without it fails rather than
// skips: the tests exist to run against a device.
const DeviceEnv = "SHIFTLOCK_VERBS_DEVICE"

func deviceName(t testing.TB) string {
	d := os.Getenv(DeviceEnv)
	if d == "" {
		t.Fatalf("%s is not set: name the RDMA device to test on (make test-verbs runs these tests against soft-RoCE in a guest)", DeviceEnv)
	}
	return d
}

// memoryNode is a memory node served over verbs in-process: the memnode,
// its verbs side on the device, and its TCP control port on loopback.
type memoryNode struct {
	host *memnode.Server
	vs   *verbs.Server
	ts   *tcpfab.Server
	addr string
}

func startMemoryNode(t testing.TB, cfg memnode.Config, mode verbs.LockTableMode) *memoryNode {
	t.Helper()
	log := zaptest.NewLogger(t)
	vs, err := verbs.NewServer(verbs.ServerConfig{DeviceConfig: verbs.DeviceConfig{Device: deviceName(t)}, LockTable: mode, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DeadAfter == 0 {
		// The tests' endpoints do not beat unless they say so.
		cfg.DeadAfter = time.Hour
	}
	cfg.Alloc = vs.Alloc
	cfg.Logger = log
	host := memnode.New(cfg)
	ts := tcpfab.NewServer(vs.Host(host), log)
	if err := vs.Serve(host, ts); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ts.Serve(ln)
	}()
	mn := &memoryNode{host: host, vs: vs, ts: ts, addr: ln.Addr().String()}
	t.Cleanup(func() {
		_ = ts.Close()
		<-done
		vs.Close()
		host.Close()
	})
	return mn
}

func join(t testing.TB, addr, name string) *verbs.Endpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Slow(20*time.Second))
	defer cancel()
	ep, err := verbs.Dial(ctx, addr, verbs.Config{DeviceConfig: verbs.DeviceConfig{Device: deviceName(t)},
		Control: tcpfab.Config{Name: name, Logger: zaptest.NewLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Slow(30*time.Second))
	t.Cleanup(cancel)
	return ctx
}

// TestVerbsConformance runs the suite every fabric passes, on real queue
// pairs over soft-RoCE: the lock table through the memory node's CPU (the
// default on a device without extended atomics), so that every verb of the
// API, masked 16-byte atomics included, is exercised.
func TestVerbsConformance(t *testing.T) {
	mn := startMemoryNode(t, memnode.Config{Entries: 1 << 14}, verbs.LockTableAuto)
	if mn.vs.Mode() != verbs.LockTableCPU {
		t.Fatalf("auto mode on %s resolved to %v, want cpu", mn.vs.Caps().Name, mn.vs.Mode())
	}
	fabrictest.Run(t, func(t *testing.T, name string) rdma.Endpoint { return join(t, mn.addr, name) },
		fabrictest.Deadlines(testproc.Slow))
}

// TestVerbsMechanisms: in the default mode the lock table is CPU and not
// registered for remote access at all, the node table and era counters are
// one-sided, and each verb goes the way its region says: a masked 16-byte
// CAS on an entry is one CPU request, a heartbeat (a 16-byte Write and an
// 8-byte Read on the node table) is one chain of one-sided work requests,
// the Write as one WRITE per word, and a batch that mixes the two takes
// one round trip per run.
func TestVerbsMechanisms(t *testing.T) {
	mn := startMemoryNode(t, memnode.Config{Entries: 64}, verbs.LockTableAuto)
	ep := join(t, mn.addr, "a")
	ctx := ctxT(t)
	for id, want := range map[rdma.RegionID]verbs.Mechanism{rdma.RegionLocks: verbs.CPU, rdma.RegionEras: verbs.OneSided, rdma.RegionNodes: verbs.OneSided} {
		if got, ok := ep.Mechanism(id); !ok || got != want {
			t.Fatalf("region %d is %v (registered %v), want %v", id, got, ok, want)
		}
	}
	l := ep.Layout()

	w0 := ep.Wire()
	if _, err := ep.MaskedCAS128(ctx, l.EntryAddr(1), rdma.U128{}, rdma.U128{}, rdma.U128{Lo: 7, Hi: 9}, allOnes); err != nil {
		t.Fatal(err)
	}
	if d := ep.Wire().Sub(w0); d.CPURequests != 1 || d.CPUOps != 1 || d.RoundTrips != 1 || d.Reads+d.Writes+d.CASes+d.FAAs != 0 {
		t.Fatalf("a masked CAS on the lock table cost %+v, want one CPU request", d)
	}

	w0 = ep.Wire()
	slot := l.NodeSlotAddr(ep.Node())
	var status [8]byte
	var hb [16]byte
	hb[0], hb[8] = 5, 6
	var b rdma.Batch
	b.Write(slot, hb[:])
	b.Read(rdma.Addr{Region: slot.Region, Offset: slot.Offset + rdma.SlotStatus}, status[:])
	if err := ep.Post(ctx, &b); err != nil || b.FirstErr() != nil {
		t.Fatal(err, b.FirstErr())
	}
	if d := ep.Wire().Sub(w0); d.Doorbells != 1 || d.RoundTrips != 1 || d.Writes != 2 || d.Reads != 1 || d.CPURequests != 0 {
		t.Fatalf("a heartbeat cost %+v, want one doorbell of two WRITEs and a READ", d)
	}
	if v, _ := mn.host.Region(rdma.RegionNodes).Load8(slot.Offset + rdma.SlotSeq); v != 6 {
		t.Fatalf("the memory node's CPU reads sequence %d from the slot, want 6", v)
	}

	w0 = ep.Wire()
	b.Reset()
	var entry [16]byte
	b.Read(l.EntryAddr(1), entry[:])
	b.Read(rdma.Addr{Region: slot.Region, Offset: slot.Offset + rdma.SlotStatus}, status[:])
	b.FAA(l.EntryAddr(2), 1)
	if err := ep.Post(ctx, &b); err != nil || b.FirstErr() != nil {
		t.Fatal(err, b.FirstErr())
	}
	if got := rdma.U128From(entry[:]); got != (rdma.U128{Lo: 7, Hi: 9}) {
		t.Fatalf("entry read through the CPU: %v", got)
	}
	if d := ep.Wire().Sub(w0); d.RoundTrips != 3 || d.CPURequests != 2 || d.Reads != 1 {
		t.Fatalf("a CPU, one-sided, CPU batch cost %+v, want three round trips", d)
	}

	// The memory node refuses a CPU request for a one-sided region: every
	// access to a word goes through one mechanism, even from a member
	// that does not follow the plan.
	st := mn.vs.Stats()
	if st.CPURequests == 0 || st.CPUOps != st.CPURequests {
		t.Fatalf("memory node stats %+v", st)
	}
}

var allOnes = rdma.U128{Lo: ^uint64(0), Hi: ^uint64(0)}

// TestVerbsOneSided: with the lock table one-sided, READ, WRITE, CAS and
// FAA are one-sided work requests on it, with the same results as the
// reference semantics (byte order and alignment included), many members'
// FAAs on one word lose no update (the device serialises its atomics), and
// masked or 16-byte atomics, which standard verbs lack, are refused on
// their own without breaking the queue pair.
func TestVerbsOneSided(t *testing.T) {
	mn := startMemoryNode(t, memnode.Config{Entries: 64}, verbs.LockTableOneSided)
	a, b := join(t, mn.addr, "a"), join(t, mn.addr, "b")
	ctx := ctxT(t)
	if m, _ := a.Mechanism(rdma.RegionLocks); m != verbs.OneSided {
		t.Fatalf("lock table is %v in one-sided mode", m)
	}
	l := a.Layout()
	addr := l.EntryAddr(3)
	r := rand.New(rand.NewPCG(1, 2))
	var model uint64
	w0 := a.Wire()
	for i := 0; i < 300; i++ {
		x := r.Uint64()
		prev := model
		var old uint64
		var err error
		switch i % 4 {
		case 0:
			var p [8]byte
			binary.LittleEndian.PutUint64(p[:], x)
			err = a.Write(ctx, addr, p[:])
			model = x
		case 1:
			cmp := prev
			if r.IntN(2) == 0 {
				cmp = x
			}
			old, err = a.CAS(ctx, addr, cmp, x^1)
			if cmp == prev {
				model = x ^ 1
			}
		case 2:
			old, err = a.FAA(ctx, addr, x)
			model = prev + x
		case 3:
			old, err = a.FAA(ctx, addr, 0)
		}
		if err != nil {
			t.Fatalf("verb %d: %v", i, err)
		}
		if i%4 != 0 && old != prev {
			t.Fatalf("verb %d returned old %#x, memory held %#x", i, old, prev)
		}
		var p [8]byte
		if err := b.Read(ctx, addr, p[:]); err != nil {
			t.Fatal(err)
		}
		if got := binary.LittleEndian.Uint64(p[:]); got != model {
			t.Fatalf("after verb %d another member reads %#x, want %#x", i, got, model)
		}
		if cpu, _ := mn.host.Region(rdma.RegionLocks).Load8(addr.Offset); cpu != model {
			t.Fatalf("after verb %d the memory node's CPU sees %#x, want %#x (byte order)", i, cpu, model)
		}
	}
	if d := a.Wire().Sub(w0); d.CPURequests != 0 || d.CASes != 75 || d.FAAs != 150 || d.Writes != 75 || d.Reads != 0 {
		t.Fatalf("one-sided verbs cost %+v, want 75 CAS, 150 FAA, 75 WRITE work requests and no CPU request", d)
	}

	if _, err := a.MaskedCAS128(ctx, addr, rdma.U128{}, rdma.U128{}, allOnes, allOnes); !errors.Is(err, rdma.ErrBadRequest) || !errors.Is(err, verbs.ErrNoExtendedAtomics) {
		t.Fatalf("masked 16-byte CAS on a one-sided lock table: %v", err)
	}
	if _, err := a.MaskedFAA64(ctx, addr, 1, 1<<31); !errors.Is(err, verbs.ErrNoExtendedAtomics) {
		t.Fatalf("masked FAA on a one-sided lock table: %v", err)
	}
	if _, err := a.FAA(ctx, rdma.Addr{Region: rdma.RegionLocks, Offset: 4}, 1); !errors.Is(err, rdma.ErrMisaligned) {
		t.Fatalf("misaligned one-sided FAA: %v", err)
	}
	if err := a.Write(ctx, l.EraAddr(0), make([]byte, 8)); !errors.Is(err, rdma.ErrBadRequest) {
		t.Fatalf("one-sided write to the era counters: %v", err)
	}
	if _, err := a.FAA(ctx, l.EntryAddr(4), 1); err != nil {
		t.Fatalf("queue pair broken by refused verbs: %v", err)
	}
	// Recovery is a CPU read-modify-write of an entry: refused here.
	if _, err := a.Control().Recover(ctx, rdma.RecoverRequest{Entry: 3}); !errors.Is(err, rdma.ErrBadRequest) {
		t.Fatalf("recovery on a one-sided lock table: %v", err)
	}

	// Concurrent FAAs from three members on one word.
	c := join(t, mn.addr, "c")
	word := l.EntryAddr(9)
	const per = 200
	eps := []*verbs.Endpoint{a, b, c}
	fabrictest.Concurrently(t, 12, func(g int) error {
		for i := 0; i < per; i++ {
			if _, err := eps[g%3].FAA(ctx, word, 1); err != nil {
				return err
			}
		}
		return nil
	})
	if v, err := a.FAA(ctx, word, 0); err != nil || v != 12*per {
		t.Fatalf("after %d one-sided FAAs the word holds %d (%v)", 12*per, v, err)
	}
}

// TestVerbsFencedMember: a member the memory node declared dead has its
// CPU verbs refused as fenced, as on tcpfab, learns it from its node
// table status word, and has its queue pair revoked, after which its
// one-sided verbs fail too instead of reaching memory.
func TestVerbsFencedMember(t *testing.T) {
	mn := startMemoryNode(t, memnode.Config{Entries: 64, HeartbeatInterval: 20 * time.Millisecond, DeadAfter: 300 * time.Millisecond}, verbs.LockTableAuto)
	ep := join(t, mn.addr, "silent")
	ctx := ctxT(t)
	for end := time.Now().Add(testproc.Slow(20 * time.Second)); mn.host.Admit(ep.Node()) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("a silent member is still admitted")
		}
	}
	if _, err := ep.FAA(ctx, ep.Layout().EntryAddr(1), 1); !errors.Is(err, rdma.ErrFenced) || !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("CPU verb of a fenced member: %v, want fenced and unreachable", err)
	}
	for end := time.Now().Add(testproc.Slow(20 * time.Second)); mn.vs.Stats().Revoked == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the fenced member's queue pair was not revoked")
		}
	}
	slot := ep.Layout().NodeSlotAddr(ep.Node())
	var st [8]byte
	err := ep.Read(ctx, rdma.Addr{Region: slot.Region, Offset: slot.Offset + rdma.SlotStatus}, st[:])
	if !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("one-sided read after revocation: %v (status %v), want unreachable", err, st)
	}
}

// TestVerbsMemoryNodeGone: when the memory node's control connection
// drops (its process died, say), every verb fails with ErrUnreachable at
// once, not after the transport's retries.
func TestVerbsMemoryNodeGone(t *testing.T) {
	mn := startMemoryNode(t, memnode.Config{Entries: 64}, verbs.LockTableAuto)
	ep := join(t, mn.addr, "a")
	ctx := ctxT(t)
	if _, err := ep.FAA(ctx, ep.Layout().EntryAddr(1), 1); err != nil {
		t.Fatal(err)
	}
	_ = mn.ts.Close()
	start := time.Now()
	for {
		_, err := ep.FAA(ctx, ep.Layout().EntryAddr(1), 1)
		if errors.Is(err, rdma.ErrUnreachable) {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("verbs still answer %v 10 s after the memory node dropped the member", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var p [8]byte
	if err := ep.Read(ctx, ep.Layout().NodeSlotAddr(ep.Node()), p[:]); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("one-sided read after the memory node went: %v", err)
	}
}

// TestVerbsPeerDies: a member that vanishes without a word (a crashed
// process: its queue pairs just stop answering) makes Sends to it fail
// with ErrUnreachable once the transport's retries run out, and a member
// that leaves says so, so Sends to it fail at once.
func TestVerbsPeerDies(t *testing.T) {
	mn := startMemoryNode(t, memnode.Config{Entries: 64}, verbs.LockTableAuto)
	a, b, c := join(t, mn.addr, "a"), join(t, mn.addr, "b"), join(t, mn.addr, "c")
	ctx := ctxT(t)
	var ib rdma.Inbox
	tgt, ch, _ := ib.Open()
	b.Bind(ib.Deliver)
	c.Bind(ib.Deliver)
	for _, to := range []*verbs.Endpoint{b, c} {
		if err := a.Send(ctx, to.Node(), tgt, rdma.Payload{1}); err != nil {
			t.Fatal(err)
		}
		<-ch
	}
	b.Kill()
	start := time.Now()
	err := a.Send(ctx, b.Node(), tgt, rdma.Payload{2})
	if !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("send to a crashed member: %v, want unreachable", err)
	}
	t.Logf("a crashed member was unreachable after %v", time.Since(start).Round(time.Millisecond))
	c.Close()
	start = time.Now()
	if err := a.Send(ctx, c.Node(), tgt, rdma.Payload{3}); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("send to a member that left: %v, want unreachable", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a member that left was found unreachable only after %v", d)
	}
}

// The benchmarks measure the emulated guest, so their numbers are for
// comparing this code with itself (and with perftest in the same guest),
// never for performance claims.

func benchVerb(b *testing.B, mode verbs.LockTableMode, parallel int, verb func(ep *verbs.Endpoint, ctx context.Context, i int) error) {
	mn := startMemoryNode(b, memnode.Config{Entries: 1 << 10}, mode)
	ep := join(b, mn.addr, "bench")
	ctx := context.Background()
	b.ResetTimer()
	if parallel <= 1 {
		for i := 0; i < b.N; i++ {
			if err := verb(ep, ctx, i); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	var wg sync.WaitGroup
	per := b.N/parallel + 1
	for g := 0; g < parallel; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if err := verb(ep, ctx, g*per+i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func oneSidedCAS(ep *verbs.Endpoint, ctx context.Context, i int) error {
	_, err := ep.CAS(ctx, ep.Layout().EntryAddr(uint64(i%1024)), 0, 0)
	return err
}

func cpuMaskedCAS(ep *verbs.Endpoint, ctx context.Context, i int) error {
	_, err := ep.MaskedCAS128(ctx, ep.Layout().EntryAddr(uint64(i%1024)), rdma.U128{}, rdma.U128{}, rdma.U128{}, rdma.U128{})
	return err
}

func BenchmarkVerbsOneSidedCAS(b *testing.B) { benchVerb(b, verbs.LockTableOneSided, 1, oneSidedCAS) }
func BenchmarkVerbsOneSidedCASx16(b *testing.B) {
	benchVerb(b, verbs.LockTableOneSided, 16, oneSidedCAS)
}
func BenchmarkVerbsCPUMaskedCAS(b *testing.B)    { benchVerb(b, verbs.LockTableCPU, 1, cpuMaskedCAS) }
func BenchmarkVerbsCPUMaskedCASx16(b *testing.B) { benchVerb(b, verbs.LockTableCPU, 16, cpuMaskedCAS) }

// hwDelta reads the device's counters before and after f.
func hwDelta(t *testing.T, f func()) map[string]uint64 {
	t.Helper()
	dev := deviceName(t)
	before, err := verbs.DeviceCounters(dev, 1)
	if err != nil {
		t.Fatal(err)
	}
	f()
	after, err := verbs.DeviceCounters(dev, 1)
	if err != nil {
		t.Fatal(err)
	}
	d := map[string]uint64{}
	for k, v := range after {
		d[k] = v - before[k]
	}
	return d
}

// TestVerbsDeviceCounters: what the endpoint counts it put on the wire
// (Wire) is what the device counted, packet for packet, for each kind of
// traffic: one-sided READ, WRITE, CAS and FAA, a batch as one chain, a
// 16-byte masked CAS through the memory node's CPU, and a Send between
// members with its acknowledgement. Nothing else uses the device while
// it runs (no heartbeats: these endpoints do not beat).
func TestVerbsDeviceCounters(t *testing.T) {
	oneSided := startMemoryNode(t, memnode.Config{Entries: 64}, verbs.LockTableOneSided)
	cpu := startMemoryNode(t, memnode.Config{Entries: 64}, verbs.LockTableCPU)
	a, b := join(t, oneSided.addr, "a"), join(t, cpu.addr, "b")
	c := join(t, cpu.addr, "c")
	var ib rdma.Inbox
	tgt, ch, _ := ib.Open()
	c.Bind(ib.Deliver)
	ctx := ctxT(t)
	// Set the queue pair from b to c up first: handshakes go over TCP.
	if err := b.Send(ctx, c.Node(), tgt, rdma.Payload{}); err != nil {
		t.Fatal(err)
	}
	<-ch
	const n = 100
	var p8 [8]byte
	for _, tc := range []struct {
		name      string
		ep        *verbs.Endpoint
		op        func(i int) error
		perOp     verbs.Wire // what one op should cost
		packetsOp uint64
	}{
		{"one-sided CAS", a, func(i int) error { _, err := a.CAS(ctx, a.Layout().EntryAddr(1), 0, 0); return err }, verbs.Wire{CASes: 1}, 2},
		{"one-sided FAA", a, func(i int) error { _, err := a.FAA(ctx, a.Layout().EntryAddr(1), 1); return err }, verbs.Wire{FAAs: 1}, 2},
		{"one-sided READ", a, func(i int) error { return a.Read(ctx, a.Layout().EntryAddr(2), p8[:]) }, verbs.Wire{Reads: 1}, 2},
		{"one-sided WRITE", a, func(i int) error { return a.Write(ctx, a.Layout().EntryAddr(2), p8[:]) }, verbs.Wire{Writes: 1}, 2},
		{"batch of 3 READs", a, func(i int) error {
			var bt rdma.Batch
			for k := 0; k < 3; k++ {
				bt.Read(a.Layout().EntryAddr(uint64(k)), make([]byte, 8))
			}
			return a.Post(ctx, &bt)
		}, verbs.Wire{Reads: 3, Doorbells: 1}, 6},
		{"16-byte masked CAS through the CPU", b, func(i int) error {
			_, err := b.MaskedCAS128(ctx, b.Layout().EntryAddr(3), rdma.U128{}, rdma.U128{}, rdma.U128{Lo: uint64(i)}, allOnes)
			return err
		}, verbs.Wire{CPURequests: 1}, 4},
		{"Send to a member", b, func(i int) error {
			if err := b.Send(ctx, c.Node(), tgt, rdma.Payload{byte(i)}); err != nil {
				return err
			}
			<-ch
			return nil
		}, verbs.Wire{PeerSends: 1}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w0 := tc.ep.Wire().Add(c.Wire())
			d := hwDelta(t, func() {
				for i := 0; i < n; i++ {
					if err := tc.op(i); err != nil {
						t.Fatal(err)
					}
				}
			})
			w := tc.ep.Wire().Add(c.Wire()).Sub(w0)
			if w.Reads != n*tc.perOp.Reads || w.Writes != n*tc.perOp.Writes || w.CASes != n*tc.perOp.CASes || w.FAAs != n*tc.perOp.FAAs ||
				w.CPURequests != n*tc.perOp.CPURequests || w.PeerSends != n*tc.perOp.PeerSends {
				t.Fatalf("%d ops counted %+v, want %d × %+v", n, w, n, tc.perOp)
			}
			if tc.perOp.Doorbells != 0 && w.Doorbells != n*tc.perOp.Doorbells {
				t.Fatalf("%d batches rang %d doorbells", n, w.Doorbells)
			}
			want := w.Packets()
			if want != n*tc.packetsOp {
				t.Fatalf("the packet model says %d packets for %d ops, want %d each", want, n, tc.packetsOp)
			}
			t.Logf("%d × %s: the device counted %v", n, tc.name, d)
			// A request sent again (its answer was late) is answered
			// again: two more packets, counted as a duplicate.
			want += 2 * d["duplicate_request"]
			if d["sent_pkts"] != want || d["rcvd_pkts"] != want {
				t.Fatalf("the device sent %d and received %d packets; the endpoints' counters say %d (%+v)", d["sent_pkts"], d["rcvd_pkts"], want, w)
			}
			if s := w.SendMessages(); d["rdma_sends"] != s || d["rdma_recvs"] != s {
				t.Fatalf("the device counted %d SENDs sent and %d received; the endpoints' counters say %d", d["rdma_sends"], d["rdma_recvs"], s)
			}
		})
	}
}
