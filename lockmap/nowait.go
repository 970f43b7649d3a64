package lockmap

import (
	"context"
	"errors"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// ErrWouldBlock is returned under a NoWait context where an operation would
// otherwise wait: a held key with a wait budget, a lock entry still being
// passed on by an abandoned wait, or any verb on a memory node that is not
// in-process. The operation has left no hold behind; the caller runs it
// again where blocking is allowed.
var ErrWouldBlock = errors.New("lockmap: operation would block")

type noWaitKey struct{}

// NoWait marks ctx for a caller that must never block, such as a server's
// event loop: Map operations under it either complete without waiting or
// return ErrWouldBlock. Only an Inline map can complete anything this way.
func NoWait(ctx context.Context) context.Context {
	return context.WithValue(ctx, noWaitKey{}, true)
}

func isNoWait(ctx context.Context) bool {
	v, _ := ctx.Value(noWaitKey{}).(bool)
	return v
}

// Inline reports whether every memory node of the map is in-process
// (rdma.Inliner), so that its operations can run on an event loop under
// NoWait. An embedded proxy's map is; a map joined to memnode processes is
// not, since each of its verbs waits for a network round trip.
func (m *Map) Inline() bool {
	for i := range m.doms {
		if !rdma.IsInline(m.doms[i].Load().Client.Endpoint()) {
			return false
		}
	}
	return true
}
