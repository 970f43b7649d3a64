package memnode_test

import (
	"context"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// TestHorizonCappedAtWhatAProxyPublishes: the lease horizon a member
// publishes counts up to the longest one a proxy can publish with max_lease
// (lockmap.Lease.horizon: its longest TTL, at most max_lease, or dead_after
// if longer, plus a quarter of dead_after), and no further. A proxy's own
// horizon is never cut; a member that publishes an hour holds up recovery,
// and so the restart grace, no longer than a proxy granting max_lease TTLs
// would.
func TestHorizonCappedAtWhatAProxyPublishes(t *testing.T) {
	const maxLease, deadAfter, drift = 8 * time.Second, 2 * time.Second, 1e-3
	longest := max(maxLease, deadAfter) + deadAfter/4
	for _, tc := range []struct {
		name       string
		push, want time.Duration
	}{
		{"the longest a proxy publishes", longest, longest},
		{"an hour", time.Hour, longest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Sweeps every half hour: only Leave reads the beat.
			host, _, a := joinOne(t, memnode.Config{Entries: 16, HeartbeatInterval: time.Hour,
				DeadAfter: deadAfter, MaxLease: maxLease, ClockDrift: drift})
			ctx := context.Background()
			if _, err := a.FAA(ctx, a.Layout().EntryAddr(3), 1); err != nil {
				t.Fatal(err)
			}
			hb := rdma.StartHeartbeat(a, func() time.Duration { return 0 }, nil)
			if err := hb.Push(ctx, tc.push); err != nil {
				t.Fatal(err)
			}
			hb.Stop()
			left := time.Now()
			_ = a.Close()
			rep, err := host.Recover(ctx, rdma.RecoverRequest{Entry: 3})
			since := time.Since(left)
			if err != nil {
				t.Fatal(err)
			}
			// The tomb's deadline is Leave's clock plus the horizon with
			// drift; Leave ran after left, and Recover before since.
			hi := time.Duration(float64(tc.want)*(1+drift)) + time.Millisecond
			lo := tc.want - since
			if rep.Status != rdma.RecoverNotYet || rep.RetryAfter > hi || rep.RetryAfter < lo {
				t.Fatalf("after a %v horizon: %v, retry after %v (%s); want not yet, retry within [%v, %v]",
					tc.push, rep.Status, rep.RetryAfter, rep.Reason, lo, hi)
			}
		})
	}
}
