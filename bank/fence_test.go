package bank

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shiftlock/shiftlock-proxy/internal/testproc"
)

// tokens is a Fenced whose tokens the test sets.
type tokens map[string]uint64

func (tokens) Release(context.Context) error { return nil }
func (t tokens) Fence(key string) (uint64, bool) {
	v, ok := t[key]
	return v, ok
}

// redisDB is a client of a redis-server of the test's own, and a context
// that bounds the test's commands.
func redisDB(t *testing.T) (*redis.Client, context.Context) {
	t.Helper()
	srv := testproc.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return rdb, ctx
}

// TestFencesRefuseTheStaleHolder plays, against a real redis-server, what
// happens behind an expired lock: a holder whose token is older than one
// that has touched the account is refused at its read and at its write,
// and the newest holder goes through.
func TestFencesRefuseTheStaleHolder(t *testing.T) {
	rdb, ctx := redisDB(t)
	if _, err := Load(ctx, rdb, LoadConfig{Accounts: 10, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	deposit := Txn{Type: DepositChecking, A: 3, Amount: 100}
	start, _ := rdb.Get(ctx, CheckingKey(3)).Int64()
	a, b := tokens{LockKey(3): 5}, tokens{LockKey(3): 6}

	// A (token 5) commits, its lock runs out, B (token 6) commits; A,
	// still believing it holds the lock, goes on with its old token.
	if _, err := applyFenced(ctx, rdb, deposit, WritesSet, a, nil); err != nil {
		t.Fatalf("A, first holder: %v", err)
	}
	if _, err := applyFenced(ctx, rdb, deposit, WritesSet, b, nil); err != nil {
		t.Fatalf("B, newer holder: %v", err)
	}
	// A is now stale in full: its next read is refused too.
	if _, err := applyFenced(ctx, rdb, deposit, WritesSet, a, nil); !errors.Is(err, ErrFenced) {
		t.Fatalf("A's read after B's: %v, want ErrFenced", err)
	}
	if got, _ := rdb.Get(ctx, CheckingKey(3)).Int64(); got != start+200 {
		t.Fatalf("checking %d, want %d (two deposits)", got, start+200)
	}

	// The write check on its own: a read with token 7, then a newer
	// reader (8) arrives before the write; the write with 7 is refused.
	d := tokens{LockKey(4): 8}
	keys := []string{FenceKey(4)}
	if err := fencedRead.Run(ctx, rdb, append(keys, CheckingKey(4)), 1, fenceArg(7), "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := fencedRead.Run(ctx, rdb, append(keys, CheckingKey(4)), 1, fenceArg(8), "x").Err(); err != nil {
		t.Fatal(err)
	}
	err := fencedWrite.Run(ctx, rdb, append(keys, CheckingKey(4)), 1, fenceArg(7), "set", 1).Err()
	if !errors.Is(fencedErr(err), ErrFenced) {
		t.Fatalf("write with 7 after a read with 8: %v, want FENCED", err)
	}
	if v, _ := rdb.Get(ctx, CheckingKey(4)).Int64(); v == 1 {
		t.Fatal("the refused write happened")
	}
	if _, err := applyFenced(ctx, rdb, Txn{Type: DepositChecking, A: 4, Amount: 1}, WritesIncr, d, nil); err != nil {
		t.Fatalf("the newest holder's incr write: %v", err)
	}

	// A stale shared holder may still read: it writes nothing.
	if _, err := applyFenced(ctx, rdb, Txn{Type: Balance, A: 3}, WritesSet, a, nil); err != nil {
		t.Fatalf("stale Balance: %v", err)
	}
	// Tokens past 2^53 compare exactly (Lua numbers would round them).
	big := tokens{LockKey(5): 1<<60 + 1}
	bigger := tokens{LockKey(5): 1<<60 + 2}
	if _, err := applyFenced(ctx, rdb, Txn{Type: DepositChecking, A: 5, Amount: 1}, WritesSet, bigger, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := applyFenced(ctx, rdb, Txn{Type: DepositChecking, A: 5, Amount: 1}, WritesSet, big, nil); !errors.Is(err, ErrFenced) {
		t.Fatalf("token 2^60+1 after 2^60+2: %v, want ErrFenced", err)
	}
}

// TestWritesReportOverdrafts checks the fenced write returns the balances
// it left, so that an overdraft a race caused is counted when it happens
// and not only if it survives to the final scan.
func TestWritesReportOverdrafts(t *testing.T) {
	rdb, ctx := redisDB(t)
	if err := rdb.MSet(ctx, SavingsKey(6), 50, CheckingKey(6), 50).Err(); err != nil {
		t.Fatal(err)
	}
	// What a withdrawal of 80 that read a stale 130 would write, next to a
	// checking overdraft, which WriteCheck may cause.
	written := []string{SavingsKey(6), CheckingKey(6)}
	after, err := fencedWrite.Run(ctx, rdb, append([]string{FenceKey(6)}, written...), 1, fenceArg(1), "incr", -80, -80).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 2 || after[0] != -30 || after[1] != -30 {
		t.Fatalf("after = %v, want [-30 -30]", after)
	}
	if !overdrawn(written, after) {
		t.Fatal("savings at -30 not reported")
	}
	if overdrawn(written[1:], after[1:]) {
		t.Fatal("an overdrawn checking account reported as overdrawn savings")
	}
	after, err = fencedWrite.Run(ctx, rdb, append([]string{FenceKey(6)}, written...), 1, fenceArg(1), "set", 0, 7).Int64Slice()
	if err != nil || len(after) != 2 || after[0] != 0 || after[1] != 7 || overdrawn(written, after) {
		t.Fatalf("set write: %v, %v", after, err)
	}
}
