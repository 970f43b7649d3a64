package bank

import "context"

// NoLocker takes no locks: the unsafe upper bound on goodput. The audit
// shows what it costs.
type NoLocker struct{}

func (NoLocker) Name() string { return "none" }

func (NoLocker) Acquire(context.Context, []LockReq) (Held, error) { return noHeld{}, nil }

func (NoLocker) Close() error { return nil }

type noHeld struct{}

func (noHeld) Release(context.Context) error { return nil }
