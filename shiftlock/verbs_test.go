//go:build verbs

package shiftlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
	"github.com/shiftlock/shiftlock-proxy/rdma/verbs"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
	"github.com/shiftlock/shiftlock-proxy/shiftlock/locktest"
)

// verbsCluster joins n client nodes to a real memnode process over RDMA
// queue pairs (rdma/verbs) on the test device.
func verbsCluster(t *testing.T, n int, cfg shiftlock.Config) ([]shiftlock.Locker, []*shiftlock.Client, []*verbs.Endpoint) {
	t.Helper()
	cfgs := make([]shiftlock.Config, n)
	for i := range cfgs {
		cfgs[i] = cfg
	}
	return verbsClusterOf(t, cfgs...)
}

// verbsClusterOf is verbsCluster with a configuration per client node.
func verbsClusterOf(t *testing.T, cfgs ...shiftlock.Config) ([]shiftlock.Locker, []*shiftlock.Client, []*verbs.Endpoint) {
	t.Helper()
	mn := testproc.VerbsMemnode(t, "-entries", "4096", "-dead-after", "10m")
	var ls []shiftlock.Locker
	var cs []*shiftlock.Client
	var eps []*verbs.Endpoint
	for _, cfg := range cfgs {
		ctx, cancel := context.WithTimeout(context.Background(), testproc.Slow(20*time.Second))
		ep, err := verbs.Dial(ctx, mn.Addr, verbs.Config{DeviceConfig: verbs.DeviceConfig{Device: testproc.VerbsDevice(t)},
			Control: tcpfab.Config{Name: "checker"}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		c := shiftlock.NewClient(ep, cfg)
		ls, cs, eps = append(ls, c), append(cs, c), append(eps, ep)
	}
	return ls, cs, eps
}

// TestVerbsMutualExclusion runs ShiftLock's checker with client nodes on
// RDMA queue pairs to a memnode process (soft-RoCE in make test-verbs):
// the lock-table atomics through the memory node's CPU, since the device
// has no extended atomics, and handovers as SENDs between the clients'
// queue pairs. The checker fails on any overlap of an exclusive holder
// with anyone, on a fencing token that does not rise, and on starvation.
func TestVerbsMutualExclusion(t *testing.T) {
	check := func(t *testing.T, eps []*verbs.Endpoint) {
		var w verbs.Wire
		for _, ep := range eps {
			w = w.Add(ep.Wire())
		}
		t.Logf("on the device: %+v", w)
		if w.CPURequests == 0 || w.PeerSends == 0 || w.PeerAcks == 0 || w.Handshakes == 0 {
			t.Fatalf("the run did not use the CPU path and the member queue pairs: %+v", w)
		}
	}
	t.Run("heavy", func(t *testing.T) {
		ls, cs, eps := verbsCluster(t, 4, shiftlock.Config{Threshold: 4})
		runTCPChecker(t, ls, cs, locktest.Workload{
			Workers: 80, Entries: 4, ReadRatio: 0.5, Ops: 25, Seed: 21,
		}, 4+1)
		check(t, eps)
	})
	t.Run("heavy-with-abandons", func(t *testing.T) {
		ls, cs, eps := verbsCluster(t, 3, shiftlock.Config{Threshold: 4})
		runTCPChecker(t, ls, cs, locktest.Workload{
			Workers: 60, Entries: 3, ReadRatio: 0.5, Ops: 25, CancelRatio: 0.3, Seed: 22,
		}, 0)
		check(t, eps)
	})
	// Stale-entry recoveries while handovers cross the queue pairs, which
	// is how heavy failed on soft-RoCE under TCG (issue 36: a Handover in
	// flight during the probes granted a pre-leap token after the reset).
	// Half the clients ask for recovery after 30 ms without progress; the
	// others check rarely, so a Handover can reach them after a reset and
	// before they look. TestMutualExclusionWithStalledHandovers is the same
	// on memfab with delays injected.
	t.Run("heavy-with-recoveries", func(t *testing.T) {
		slow := shiftlock.Config{Threshold: 4, CheckInterval: 500 * time.Millisecond, StaleAfter: 10 * time.Second}
		quick := shiftlock.Config{Threshold: 4, CheckInterval: 10 * time.Millisecond, StaleAfter: 30 * time.Millisecond}
		ls, cs, eps := verbsClusterOf(t, slow, quick, slow, quick)
		runTCPChecker(t, ls, cs, locktest.Workload{
			Workers: 40, Entries: 2, ReadRatio: 0.5, Ops: 25, Seed: 24,
		}, 0)
		var asked uint64
		for _, c := range cs {
			asked += c.Stats().RecoveryRequests.Load()
		}
		if asked == 0 {
			t.Fatal("no waiter asked for recovery: the run did not exercise what it is for")
		}
		check(t, eps)
	})
	t.Run("light", func(t *testing.T) {
		ls, cs, eps := verbsCluster(t, 4, shiftlock.Config{})
		runTCPChecker(t, ls, cs, locktest.Workload{
			Workers: 100, Entries: 1000, Zipf: 1.2, ReadRatio: 0.5, Ops: 20, Seed: 23,
		}, 16+1)
		check(t, eps)
	})
}

// TestVerbsFig6Accounting is ShiftLock Fig. 6's accounting on a real verbs
// stack: a Zipf, write-intensive (50% shared) acquire-release workload over
// RDMA queue pairs, counted three ways. The rdma counters give the paper's
// columns (atomics, READs and WRITEs per cycle, as the fabric API sees
// them); the endpoints' wire counters say how those travelled (one-sided
// work requests, or requests to the memory node's CPU, since soft-RoCE has
// no extended atomics); and the device's own counters must agree with the
// wire counters packet for packet.
func TestVerbsFig6Accounting(t *testing.T) {
	ls, cs, eps := verbsCluster(t, 3, shiftlock.Config{})
	dev := testproc.VerbsDevice(t)
	var l0 rdma.Snapshot
	var w0 verbs.Wire
	for i, ep := range eps {
		l0 = l0.Add(cs[i].Endpoint().Counters().Snapshot())
		w0 = w0.Add(ep.Wire())
	}
	hw0, err := verbs.DeviceCounters(dev, 1)
	if err != nil {
		t.Fatal(err)
	}
	chk := locktest.NewChecker(1000)
	res, err := locktest.Run(ctxT(t), locktest.Workload{Clients: ls, Workers: 24, Entries: 1000, Zipf: 1.01, ReadRatio: 0.5, Ops: 25, Seed: 6}, chk)
	if err != nil {
		t.Fatal(err)
	}
	// Releases complete in the background (handover Sends): wait until
	// the device is quiet before reading it.
	var hw1 map[string]uint64
	for prev := uint64(0); ; time.Sleep(200 * time.Millisecond) {
		if hw1, err = verbs.DeviceCounters(dev, 1); err != nil {
			t.Fatal(err)
		}
		if hw1["sent_pkts"] == prev {
			break
		}
		prev = hw1["sent_pkts"]
	}
	var l rdma.Snapshot
	var w verbs.Wire
	for i, ep := range eps {
		l = l.Add(cs[i].Endpoint().Counters().Snapshot())
		w = w.Add(ep.Wire())
	}
	l, w = l.Sub(l0), w.Sub(w0)
	if v := chk.Violations(); v != 0 {
		t.Fatalf("%d violations: %v", v, chk.Report())
	}
	cycles := float64(res.Ops)
	per := func(x uint64) float64 { return float64(x) / cycles }
	t.Logf("%d cycles, per cycle: %.2f atomics, %.2f READs, %.2f WRITEs, %.2f Sends (rdma counters, Fig. 6's columns)",
		res.Ops, per(l.OutAtomics()), per(l.Out[rdma.VerbRead]), per(l.Out[rdma.VerbWrite]), per(l.Out[rdma.VerbSend]))
	t.Logf("on the wire, per cycle: %.2f CPU requests carrying %.2f verbs, %.2f one-sided work requests, %.2f member SENDs, %.2f round trips; %.2f packets",
		per(w.CPURequests), per(w.CPUOps), per(w.Reads+w.Writes+w.CASes+w.FAAs), per(w.PeerSends+w.PeerAcks), per(w.RoundTrips), per(w.Packets()))
	if got := l.OutAtomics() + l.Out[rdma.VerbRead] + l.Out[rdma.VerbWrite]; got != w.CPUOps+w.Reads+w.Writes+w.CASes+w.FAAs {
		t.Fatalf("%d verbs in the rdma counters, %d on the wire (%+v)", got, w.CPUOps+w.Reads+w.Writes+w.CASes+w.FAAs, w)
	}
	if l.Out[rdma.VerbSend] != w.PeerSends {
		t.Fatalf("%d Sends in the rdma counters, %d on the wire", l.Out[rdma.VerbSend], w.PeerSends)
	}
	sent, rcvd := hw1["sent_pkts"]-hw0["sent_pkts"], hw1["rcvd_pkts"]-hw0["rcvd_pkts"]
	sends := hw1["rdma_sends"] - hw0["rdma_sends"]
	// A request the transport sent again (its answer was late) reaches
	// the responder as a duplicate, which answers it again: two packets.
	dup := hw1["duplicate_request"] - hw0["duplicate_request"]
	t.Logf("the device counted %d packets sent, %d received, %d SENDs, %d duplicate requests", sent, rcvd, sends, dup)
	want := w.Packets() + 2*dup
	if sent != want || rcvd != want || sends != w.SendMessages() {
		t.Fatalf("the device counted %d/%d packets and %d SENDs; the endpoints' wire counters say %d packets (%d retransmitted) and %d SENDs (out of sequence: %d)",
			sent, rcvd, sends, want, 2*dup, w.SendMessages(), hw1["out_of_seq_request"]-hw0["out_of_seq_request"])
	}
}
