package bank

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Snapshot is the state of every balance at one moment (taken while no
// transaction runs).
type Snapshot struct {
	Total int64 // all savings and checking, in cents
	// NegativeSavings counts savings balances below zero: no transaction
	// allows one. NegativeChecking counts overdrawn checking balances, which
	// only WriteCheck's overdraft (and Amalgamate, moving one) may cause.
	NegativeSavings, NegativeChecking int
	MinSavings                        int64
}

// auditBatch accounts are read per MGET.
const auditBatch = 1000

// Scan reads accounts [0, n).
func Scan(ctx context.Context, rdb *redis.Client, n uint64) (Snapshot, error) {
	var mu sync.Mutex
	s := Snapshot{MinSavings: MaxBalance}
	err := parallel(ctx, 8, n, auditBatch, func(ctx context.Context, lo, hi uint64) error {
		keys := make([]string, 0, 2*(hi-lo))
		for id := lo; id < hi; id++ {
			keys = append(keys, SavingsKey(id), CheckingKey(id))
		}
		vals, err := rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return fmt.Errorf("bank: audit read: %w", err)
		}
		var part Snapshot
		part.MinSavings = MaxBalance
		for i, v := range vals {
			str, ok := v.(string)
			if !ok {
				return fmt.Errorf("bank: audit: %s is missing (is the bank loaded with %d accounts?)", keys[i], n)
			}
			x, err := strconv.ParseInt(str, 10, 64)
			if err != nil {
				return fmt.Errorf("bank: audit: %s = %q: %w", keys[i], str, err)
			}
			part.Total += x
			switch {
			case i%2 == 0 && x < 0:
				part.NegativeSavings++
			case i%2 == 1 && x < 0:
				part.NegativeChecking++
			}
			if i%2 == 0 {
				part.MinSavings = min(part.MinSavings, x)
			}
		}
		mu.Lock()
		s.Total += part.Total
		s.NegativeSavings += part.NegativeSavings
		s.NegativeChecking += part.NegativeChecking
		s.MinSavings = min(s.MinSavings, part.MinSavings)
		mu.Unlock()
		return nil
	})
	return s, err
}

// Audit compares the bank after a run with the bank before it and the money
// the committed transactions brought in or took out.
type Audit struct {
	Before, After Snapshot
	// Deltas is the sum of the committed transactions' deltas; Expected is
	// Before.Total + Deltas, and Mismatch is After.Total - Expected.
	Deltas, Expected, Mismatch int64
	// Unknown counts transactions whose write outcome is unknown; while
	// any exist the money check cannot be exact.
	Unknown int64
	// NewNegativeSavings is how many more savings balances are negative
	// after the run than before.
	NewNegativeSavings int
	// Overdrawn counts committed writes the data store answered with a
	// savings balance below zero (Outcome.Overdrawn). The final scan can
	// miss these, since a later deposit or Amalgamate repairs the balance.
	Overdrawn int64
	OK        bool
	Problems  []string
}

// Check fills in the verdict.
func (a *Audit) Check() {
	a.Expected = a.Before.Total + a.Deltas
	a.Mismatch = a.After.Total - a.Expected
	a.NewNegativeSavings = a.After.NegativeSavings - a.Before.NegativeSavings
	a.Problems = nil
	if a.Mismatch != 0 {
		a.Problems = append(a.Problems, fmt.Sprintf("money does not add up: the bank holds %s, expected %s (%s before, %s committed deltas): %s %s",
			Cents(a.After.Total), Cents(a.Expected), Cents(a.Before.Total), Cents(a.Deltas), Cents(abs(a.Mismatch)), map[bool]string{true: "created", false: "lost"}[a.Mismatch > 0]))
	}
	if a.After.NegativeSavings > 0 {
		a.Problems = append(a.Problems, fmt.Sprintf("%d savings balances are negative (lowest %s); no transaction allows that", a.After.NegativeSavings, Cents(a.After.MinSavings)))
	}
	if a.Overdrawn > 0 {
		a.Problems = append(a.Problems, fmt.Sprintf("%d writes left a savings balance negative while the run went on", a.Overdrawn))
	}
	if a.Unknown > 0 {
		a.Problems = append(a.Problems, fmt.Sprintf("%d transactions have an unknown write outcome", a.Unknown))
	}
	a.OK = len(a.Problems) == 0
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// Cents formats an amount of cents as dollars.
func Cents(c int64) string {
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	return fmt.Sprintf("%s$%s.%02d", sign, groupDigits(c/100), c%100)
}

func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
