package bank

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// WriteMode is how a transaction writes its new balances.
type WriteMode uint8

const (
	// WritesSet writes absolute values (MSET): lost updates without locks.
	WritesSet WriteMode = iota
	// WritesIncr writes deltas (INCRBY in MULTI/EXEC): negative balances
	// without locks.
	WritesIncr
)

// ParseWriteMode reads "set" or "incr".
func ParseWriteMode(s string) (WriteMode, error) {
	switch s {
	case "set":
		return WritesSet, nil
	case "incr":
		return WritesIncr, nil
	}
	return 0, fmt.Errorf("bank: unknown write mode %q (want set or incr)", s)
}

func (w WriteMode) String() string {
	if w == WritesIncr {
		return "incr"
	}
	return "set"
}

// Errors from Exec.
var (
	// ErrWrite: the write may or may not have happened (the reply was lost),
	// so the audit cannot account for this transaction.
	ErrWrite = errors.New("bank: write outcome unknown")
	// ErrRelease: a lock was no longer held at release: the transaction ran
	// without isolation for part of its life.
	ErrRelease = errors.New("bank: lock lost before release")
)

// ExecOptions say how a transaction reads and writes.
type ExecOptions struct {
	Writes WriteMode
	// Fence checks every read and write against the locks' fencing tokens
	// (see FenceKey); the locker's Held must be Fenced.
	Fence bool
	// BalanceLockFree runs Balance without locks, as a read inside WATCH
	// and UNWATCH, the way the ShiftLock paper's artifact does. Balance
	// writes nothing, so the books do not depend on it.
	BalanceLockFree bool
	// Lookup first resolves the accounts' names to their ids with ZRANK
	// inside WATCH (NamesKey), as the artifact does.
	Lookup bool
	// Hold, if set, is called with the transaction's locks held, after its
	// reads and before its writes: what a holder that pauses there (a GC
	// pause, a slow network, a TTL shorter than the work) would do, on the
	// test's schedule. Tests use it to hold a lock past its TTL and run
	// another transaction meanwhile, so that what an expired lock costs is
	// shown every time instead of when the scheduler happens to interleave
	// two holders. The benchmark never sets it.
	Hold func()
}

// Exec runs t under two-phase locking: every lock, then the reads, the
// writes, then every release. ctx bounds only the lock waits: once the locks
// are held the transaction runs to its end, so a run that stops never leaves
// a write half-known.
func Exec(ctx context.Context, rdb *redis.Client, l Locker, t Txn, opt ExecOptions) (Outcome, error) {
	if opt.Lookup {
		if err := lookup(ctx, rdb, t); err != nil {
			return Outcome{}, err
		}
	}
	if opt.BalanceLockFree && t.Type == Balance {
		return watchedRead(ctx, rdb, t)
	}
	held, err := l.Acquire(ctx, t.LockReqs())
	if err != nil {
		return Outcome{}, err
	}
	ctx = context.WithoutCancel(ctx)
	var o Outcome
	if opt.Fence {
		fh, ok := held.(Fenced)
		if !ok {
			err = fmt.Errorf("bank: the %s locker gives no fencing tokens", l.Name())
		} else {
			o, err = applyFenced(ctx, rdb, t, opt.Writes, fh, opt.Hold)
		}
	} else {
		o, err = apply(ctx, rdb, t, opt.Writes, opt.Hold)
	}
	if rerr := held.Release(ctx); rerr != nil {
		switch {
		case err == nil:
			err = fmt.Errorf("%w: %v", ErrRelease, rerr)
		case errors.Is(err, ErrFenced):
			// Fenced out because the lock ran out: both are true.
			err = fmt.Errorf("%w; %w: %v", err, ErrRelease, rerr)
		}
	}
	return o, err
}

// lookup is the artifact's account-id lookup: WATCH the name index, ZRANK
// each account's name, UNWATCH.
func lookup(ctx context.Context, rdb *redis.Client, t Txn) error {
	ids := []uint64{t.A}
	if t.Type.Accounts() == 2 {
		ids = append(ids, t.B)
	}
	return rdb.Watch(ctx, func(tx *redis.Tx) error {
		for _, id := range ids {
			rank, err := tx.ZRank(ctx, NamesKey, AccountName(id)).Result()
			if err != nil {
				return fmt.Errorf("bank: looking up %s: %w", AccountName(id), err)
			}
			if uint64(rank) != id {
				return fmt.Errorf("bank: %s has rank %d, want %d (is the bank loaded?)", AccountName(id), rank, id)
			}
		}
		return nil
	}, NamesKey)
}

// watchedRead is the artifact's lock-free Balance: WATCH both balances,
// read them, UNWATCH. (The artifact's transaction helper returns before
// any EXEC, so the WATCH checks nothing; it is kept for its cost.)
func watchedRead(ctx context.Context, rdb *redis.Client, t Txn) (Outcome, error) {
	keys := t.Keys()
	var vals []int64
	err := rdb.Watch(ctx, func(tx *redis.Tx) error {
		raw, err := tx.MGet(ctx, keys...).Result()
		if err != nil {
			return fmt.Errorf("bank: read %v: %w", keys, err)
		}
		vals, err = parseBalances(keys, raw)
		return err
	}, keys...)
	if err != nil {
		return Outcome{}, err
	}
	return t.Apply(vals), nil
}

// parseBalances reads MGET's answer for keys.
func parseBalances(keys []string, raw []any) ([]int64, error) {
	if len(raw) != len(keys) {
		return nil, fmt.Errorf("bank: read %v: %d values", keys, len(raw))
	}
	vals := make([]int64, len(keys))
	for i, r := range raw {
		s, ok := r.(string)
		if !ok {
			return nil, fmt.Errorf("bank: %s is missing (is the bank loaded?)", keys[i])
		}
		var err error
		if vals[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return nil, fmt.Errorf("bank: %s = %q: %w", keys[i], s, err)
		}
	}
	return vals, nil
}

// compute is a transaction's step between its read and its write: it
// parses the balances read for keys (t's), applies t to them, and calls
// hold (if set).
func compute(t Txn, keys []string, raw []any, hold func()) ([]int64, Outcome, error) {
	vals, err := parseBalances(keys, raw)
	if err != nil {
		return nil, Outcome{}, err
	}
	o := t.Apply(vals)
	if hold != nil {
		hold()
	}
	return vals, o, nil
}

// apply reads t's balances, calls hold (if set), and writes the new ones.
func apply(ctx context.Context, rdb *redis.Client, t Txn, w WriteMode, hold func()) (Outcome, error) {
	keys := t.Keys()
	raw, err := rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return Outcome{}, fmt.Errorf("bank: read %v: %w", keys, err)
	}
	vals, o, err := compute(t, keys, raw, hold)
	if err != nil {
		return Outcome{}, err
	}
	var args []any
	for i, ch := range o.Changed {
		if ch {
			args = append(args, keys[i], o.New[i])
		}
	}
	if len(args) == 0 {
		return o, nil
	}
	if w == WritesSet {
		err = rdb.MSet(ctx, args...).Err()
	} else {
		var written []string
		var incrs []*redis.IntCmd
		_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for i, ch := range o.Changed {
				if ch {
					written = append(written, keys[i])
					incrs = append(incrs, p.IncrBy(ctx, keys[i], o.New[i]-vals[i]))
				}
			}
			return nil
		})
		if err == nil {
			after := make([]int64, len(incrs))
			for i, c := range incrs {
				after[i] = c.Val()
			}
			o.Overdrawn = overdrawn(written, after)
		}
	}
	if err != nil {
		return o, fmt.Errorf("%w: %v", ErrWrite, err)
	}
	return o, nil
}
