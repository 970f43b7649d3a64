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

// Exec runs t under two-phase locking: every lock, then the reads, the
// writes, then every release. ctx bounds only the lock waits: once the locks
// are held the transaction runs to its end, so a run that stops never leaves
// a write half-known.
func Exec(ctx context.Context, rdb *redis.Client, l Locker, t Txn, w WriteMode) (Outcome, error) {
	held, err := l.Acquire(ctx, t.LockReqs())
	if err != nil {
		return Outcome{}, err
	}
	ctx = context.WithoutCancel(ctx)
	o, err := apply(ctx, rdb, t, w)
	if rerr := held.Release(ctx); rerr != nil && err == nil {
		err = fmt.Errorf("%w: %v", ErrRelease, rerr)
	}
	return o, err
}

func apply(ctx context.Context, rdb *redis.Client, t Txn, w WriteMode) (Outcome, error) {
	keys := t.Keys()
	raw, err := rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return Outcome{}, fmt.Errorf("bank: read %v: %w", keys, err)
	}
	vals := make([]int64, len(keys))
	for i, r := range raw {
		s, ok := r.(string)
		if !ok {
			return Outcome{}, fmt.Errorf("bank: %s is missing (is the bank loaded?)", keys[i])
		}
		if vals[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return Outcome{}, fmt.Errorf("bank: %s = %q: %w", keys[i], s, err)
		}
	}
	o := t.Apply(vals)
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
		_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for i, ch := range o.Changed {
				if ch {
					p.IncrBy(ctx, keys[i], o.New[i]-vals[i])
				}
			}
			return nil
		})
	}
	if err != nil {
		return o, fmt.Errorf("%w: %v", ErrWrite, err)
	}
	return o, nil
}
