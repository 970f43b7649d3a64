package bank

import (
	"math/rand/v2"
	"strconv"
)

// MetaKey holds the number of accounts loaded.
const MetaKey = "bank:accounts"

// NamesKey is a sorted set of every account's name (AccountName) scored by
// its id, so that ZRANK of a name is its id: the ShiftLock artifact's
// account-id lookup (ExecOptions.Lookup).
const NamesKey = "bank:names"

// AccountName is account id's customer-facing name.
func AccountName(id uint64) string { return "cust-" + strconv.FormatUint(id, 10) }

// SavingsKey, CheckingKey and LockKey name account id's data and lock keys.
func SavingsKey(id uint64) string  { return savingsPrefix + strconv.FormatUint(id, 10) }
func CheckingKey(id uint64) string { return "checking:" + strconv.FormatUint(id, 10) }
func LockKey(id uint64) string     { return "lock:acct:" + strconv.FormatUint(id, 10) }

const savingsPrefix = "savings:"

// Initial balances are uniform in [MinBalance, MaxBalance] cents.
const (
	MinBalance = 10_000  // $100.00
	MaxBalance = 100_000 // $1,000.00
)

// InitialBalances returns account id's opening savings and checking
// balances. They depend only on seed and id, so a load can be split across
// workers and repeated exactly.
func InitialBalances(seed, id uint64) (savings, checking int64) {
	r := rand.New(rand.NewPCG(seed, id))
	span := int64(MaxBalance - MinBalance + 1)
	return MinBalance + r.Int64N(span), MinBalance + r.Int64N(span)
}
