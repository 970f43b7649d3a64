package shiftlock

import "context"

// Locker is what ShiftLock and its baselines (bench/shiftlock/baseline) have in
// common, so that one benchmark and one checker drive them all. Locks are
// named by lock-table entry.
type Locker interface {
	// Acquire blocks until entry is held in mode m, or ctx ends.
	Acquire(ctx context.Context, entry uint64, m Mode) (Grant, error)
	// Entries is the number of lock entries.
	Entries() uint64
}

// Grant is a held lock.
type Grant interface {
	// Token is the grant's fencing token (0 for locks that have none).
	Token() uint64
	Release(ctx context.Context) error
}

// Acquire implements Locker.
func (c *Client) Acquire(ctx context.Context, entry uint64, m Mode) (Grant, error) {
	if m == Shared {
		return c.AcquireShared(ctx, entry)
	}
	return c.AcquireExclusive(ctx, entry)
}

var _ Locker = (*Client)(nil)

type arrivalKey struct{}

// WithArrival returns a context that makes an acquisition call f as soon as
// its enqueuing atomic has landed: the moment the algorithm considers it to
// have arrived. Checkers use it to measure waits from the right instant.
func WithArrival(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, arrivalKey{}, f)
}

func arrived(ctx context.Context) {
	if f, ok := ctx.Value(arrivalKey{}).(func()); ok {
		f()
	}
}

type queueKey struct{}

// WithQueueHook returns a context under which an acquisition that has to
// wait (its enqueuing atomic found a holder, or readers to wait out) calls
// hook first; the context hook returns governs the wait, and stop is called
// when the wait is over. A proxy watches for a client that hangs up while
// queued this way, without watching the acquisitions that never wait.
func WithQueueHook(ctx context.Context, hook func(context.Context) (context.Context, func())) context.Context {
	return context.WithValue(ctx, queueKey{}, hook)
}

func onQueue(ctx context.Context) (context.Context, func()) {
	if hook, ok := ctx.Value(queueKey{}).(func(context.Context) (context.Context, func())); ok && hook != nil {
		return hook(ctx)
	}
	return ctx, func() {}
}
