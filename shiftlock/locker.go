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

// HookedLocker is a Locker whose acquisitions tell their caller how they
// progress (Hooks). ShiftLock's Client is one; a checker uses it where it
// can, to measure waits from the right instant.
type HookedLocker interface {
	Locker
	AcquireHooked(ctx context.Context, entry uint64, m Mode, h Hooks) (Grant, error)
}

// Hooks is what the caller of an acquisition hears of it besides its
// result. The zero value hears nothing. They are arguments, not context
// values: a context carries cancellation only.
type Hooks struct {
	// Arrived is called as soon as the enqueuing atomic has landed: the
	// moment the algorithm considers the acquisition to have arrived.
	Arrived func()
	// Queued is called when the acquisition has to wait (its atomic found
	// a holder, or readers to wait out), with its context; the context it
	// returns governs the wait, and stop is called when the wait is over.
	// A proxy sets up its wait budget and its watch for a client that
	// hangs up here, so that an acquisition that never waits pays for
	// neither.
	Queued func(ctx context.Context) (qctx context.Context, stop func())
}

func (h *Hooks) arrived() {
	if h.Arrived != nil {
		h.Arrived()
	}
}

func (h *Hooks) queued(ctx context.Context) (context.Context, func()) {
	if h.Queued != nil {
		return h.Queued(ctx)
	}
	return ctx, func() {}
}

// Acquire implements Locker.
func (c *Client) Acquire(ctx context.Context, entry uint64, m Mode) (Grant, error) {
	return c.AcquireHooked(ctx, entry, m, Hooks{})
}

// AcquireHooked implements HookedLocker.
func (c *Client) AcquireHooked(ctx context.Context, entry uint64, m Mode, h Hooks) (Grant, error) {
	if m == Shared {
		return c.AcquireSharedHooked(ctx, entry, h)
	}
	return c.AcquireExclusiveHooked(ctx, entry, 0, h)
}

var _ HookedLocker = (*Client)(nil)
