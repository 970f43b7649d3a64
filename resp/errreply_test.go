package resp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/shiftlock"
)

// TestErrReplyNamesLimits: the lock table's limits reach the client as
// errors that say which limit and what to do, however deep they are
// wrapped (itest TestHeldLocksLimit takes the first end to end; the second
// takes 4 million shared holds to reach).
func TestErrReplyNamesLimits(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want []string
	}{
		{fmt.Errorf("lockmap: acquire: %w", rdma.ErrInboxFull), []string{"ERR ", "65536 locks", "more proxies"}},
		{fmt.Errorf("lockmap: acquire: %w", shiftlock.ErrTooManyReaders), []string{"ERR ", "4194304 shared holders", "release some"}},
	} {
		got := errReply(tc.err)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("errReply(%v) = %q, want it to contain %q", tc.err, got, w)
			}
		}
	}
}
