//go:build verbs

package verbsproc

import (
	"context"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
	"github.com/shiftlock/shiftlock-proxy/rdma/verbs"
)

// Join starts a memnode process on the test device's verbs fabric, with
// memnodeArgs, and dials n members to it, named name on its control
// connection; they close when t ends.
func Join(t testing.TB, n int, name string, memnodeArgs ...string) []*verbs.Endpoint {
	t.Helper()
	mn := testproc.VerbsMemnode(t, memnodeArgs...)
	var eps []*verbs.Endpoint
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), testproc.Slow(20*time.Second))
		ep, err := verbs.Dial(ctx, mn.Addr, verbs.Config{DeviceConfig: verbs.DeviceConfig{Device: testproc.VerbsDevice(t)},
			Control: tcpfab.Config{Name: name}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		eps = append(eps, ep)
	}
	return eps
}
