//go:build verbs

package verbs

import (
	"context"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// Built reports whether this binary can reach RDMA devices.
const Built = true

// Join is Dial for callers that want an rdma.Endpoint (and build without
// the verbs tag too, where it fails with ErrNotBuilt).
func Join(ctx context.Context, addr string, cfg Config) (rdma.Endpoint, error) {
	e, err := Dial(ctx, addr, cfg)
	if err != nil {
		return nil, err
	}
	return e, nil
}
