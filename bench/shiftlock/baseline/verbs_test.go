//go:build verbs

package baseline_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/bench/shiftlock/baseline"
	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
	"github.com/shiftlock/shiftlock-proxy/rdma/verbs"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
	"github.com/shiftlock/shiftlock-proxy/shiftlock/locktest"
)

// verbsEndpoints joins n client nodes to a memnode process on RDMA queue
// pairs, its lock table in the given mode (verbs-lock-table).
func verbsEndpoints(t *testing.T, n int, mode string, entries int) []*verbs.Endpoint {
	t.Helper()
	mn := testproc.VerbsMemnode(t, "-entries", fmt.Sprint(entries), "-dead-after", "10m", "-verbs-lock-table", mode)
	var eps []*verbs.Endpoint
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), testproc.Slow(20*time.Second))
		ep, err := verbs.Dial(ctx, mn.Addr, verbs.Config{DeviceConfig: verbs.DeviceConfig{Device: testproc.VerbsDevice(t)},
			Control: tcpfab.Config{Name: "baseline"}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		eps = append(eps, ep)
	}
	return eps
}

// TestVerbsBaselines runs the CAS, DSLR and MCS baselines under the checker
// on RDMA queue pairs. CAS and DSLR use only standard 8-byte verbs, so they
// run truly one-sided, with the lock table registered for remote READ,
// WRITE and atomics, and the memory node's CPU never involved; MCS enqueues
// with a 16-byte masked CAS, so its lock table goes through the memory
// node's CPU, and its handovers are SENDs between the clients.
func TestVerbsBaselines(t *testing.T) {
	modes := map[string]string{"cas-nb": "one-sided", "cas-b": "one-sided", "dslr": "one-sided", "dslr-countmax8": "one-sided", "mcs": "cpu"}
	// DSLR's lease resets assume holders are live and prompt (see
	// checkerLease); a guest under emulation on a loaded host is neither
	// by seconds, so its lease is longer than a run here.
	const verbsLease = time.Minute
	vkinds := append([]kind(nil), kinds...)
	for i := range vkinds {
		switch vkinds[i].name {
		case "dslr":
			vkinds[i].mk = func(ep rdma.Endpoint) shiftlock.Locker {
				return baseline.NewDSLR(ep, baseline.DSLRConfig{Lease: verbsLease})
			}
		case "dslr-countmax8":
			vkinds[i].mk = func(ep rdma.Endpoint) shiftlock.Locker {
				return baseline.NewDSLR(ep, baseline.DSLRConfig{Lease: verbsLease, CountMax: 8})
			}
		}
	}
	for _, k := range vkinds {
		for _, sh := range []struct {
			name    string
			entries int
			zipf    float64
		}{{"few-entries", 3, 0}, {"many-entries", 1000, 1.2}} {
			t.Run(fmt.Sprintf("%s/%s", k.name, sh.name), func(t *testing.T) {
				mode := modes[k.name]
				eps := verbsEndpoints(t, 3, mode, 4096)
				lockers := make([]shiftlock.Locker, len(eps))
				for i, ep := range eps {
					lockers[i] = k.mk(ep)
				}
				chk := locktest.NewChecker(sh.entries)
				chk.NoTokens = true
				dev := testproc.VerbsDevice(t)
				hw0, err := verbs.DeviceCounters(dev, 1)
				if err != nil {
					t.Fatal(err)
				}
				res, err := locktest.Run(ctxT(t), locktest.Workload{
					Clients: lockers, Workers: 40, Entries: sh.entries, ReadRatio: 0.5, Zipf: sh.zipf,
					Ops: 20, Duration: 10 * time.Second, Seed: 7,
				}, chk)
				if err != nil {
					t.Fatal(err)
				}
				dslrStats := ""
				for _, l := range lockers {
					if d, ok := l.(*baseline.DSLR); ok {
						st := d.Stats()
						dslrStats += fmt.Sprintf(" [grants %d failures %d overflow resets %d lease resets %d expired leases %d]",
							st.Grants.Load(), st.Failures.Load(), st.OverflowResets.Load(), st.LeaseResets.Load(), st.ExpiredLeases.Load())
					}
				}
				if v := chk.Violations(); v != 0 {
					t.Fatalf("%d violations: %v%s", v, chk.Report(), dslrStats)
				}
				if res.Ops == 0 {
					t.Fatal("no acquisitions completed")
				}
				var w verbs.Wire
				var l rdma.Snapshot
				for _, ep := range eps {
					w = w.Add(ep.Wire())
					l = l.Add(ep.Counters().Snapshot())
				}
				// Every verb has completed; the device counted them all.
				hw1, err := verbs.DeviceCounters(dev, 1)
				if err != nil {
					t.Fatal(err)
				}
				dup := hw1["duplicate_request"] - hw0["duplicate_request"]
				if sent, want := hw1["sent_pkts"]-hw0["sent_pkts"], w.Packets()+2*dup; sent != want {
					t.Fatalf("the device sent %d packets; the endpoints' wire counters say %d (%+v, %d retransmitted)", sent, want, w, dup)
				}
				per := func(x uint64) float64 { return float64(x) / float64(res.Ops) }
				t.Logf("per cycle: %.2f atomics, %.2f READs, %.2f WRITEs (rdma counters); %.2f packets on the device",
					per(l.OutAtomics()), per(l.Out[rdma.VerbRead]), per(l.Out[rdma.VerbWrite]), per(w.Packets()+2*dup))
				t.Logf("%d cycles in %v; on the device: %+v%s", res.Ops, res.Elapsed.Round(time.Millisecond), w, dslrStats)
				if mode == "one-sided" && (w.CPURequests != 0 || w.CASes+w.FAAs == 0) {
					t.Fatalf("a one-sided lock used the memory node's CPU or no atomics: %+v", w)
				}
				if mode == "cpu" && w.CPURequests == 0 {
					t.Fatalf("MCS never reached the memory node's CPU: %+v", w)
				}
				// Every lock is free again, read back one-sided or through
				// the CPU, whichever the region takes.
				for i := 0; i < sh.entries; i++ {
					var b [8]byte
					if err := eps[0].Read(ctxT(t), eps[0].Layout().EntryAddr(uint64(i)), b[:]); err != nil {
						t.Fatal(err)
					}
					word := binary.LittleEndian.Uint64(b[:])
					idle := word == 0
					if strings.HasPrefix(k.name, "dslr") {
						idle = baseline.DSLRIdle(word)
					}
					if !idle {
						t.Errorf("entry %d not idle after the run: %#x", i, word)
					}
				}
			})
		}
	}
}
