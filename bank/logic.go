package bank

import "strings"

// Overdraft is WriteCheck's penalty, in cents, for a check larger than the
// account's total balance (SmallBank charges $1).
const Overdraft = 100

// Keys are the balance keys t reads, in the order Apply expects their
// values. Every key t writes is among them.
func (t Txn) Keys() []string {
	switch t.Type {
	case Balance, WriteCheck:
		return []string{SavingsKey(t.A), CheckingKey(t.A)}
	case DepositChecking:
		return []string{CheckingKey(t.A)}
	case TransactSavings:
		return []string{SavingsKey(t.A)}
	case Amalgamate:
		return []string{SavingsKey(t.A), CheckingKey(t.A), CheckingKey(t.B)}
	case SendPayment:
		return []string{CheckingKey(t.A), CheckingKey(t.B)}
	}
	return nil
}

// Outcome is what a transaction does given the balances it read.
type Outcome struct {
	// New holds the new value of each key in Keys(); Changed says which.
	New     []int64
	Changed []bool
	// Delta is the money the transaction brings into the bank (negative:
	// takes out). Transfers move money and have none.
	Delta int64
	// Declined: the transaction's own rule refused it (insufficient funds);
	// it commits without writing, as SmallBank's rollback does.
	Declined bool
	// Overdrawn is set by Exec, not Apply: the data store answered a delta
	// write with a savings balance below zero. Apply never asks for one, so
	// another transaction wrote the account between this one's read and
	// write. The audit counts these because a later deposit or Amalgamate
	// can repair the balance before the final scan sees it.
	Overdrawn bool
}

// overdrawn says whether the balances a write left behind (after, one per
// written key) include a savings balance below zero.
func overdrawn(written []string, after []int64) bool {
	for i, k := range written {
		if i < len(after) && after[i] < 0 && strings.HasPrefix(k, savingsPrefix) {
			return true
		}
	}
	return false
}

// Apply runs SmallBank's logic on the values of t.Keys(). It never lets a
// savings balance go negative, nor SendPayment overdraw checking; only
// WriteCheck may overdraw checking, paying the Overdraft penalty.
func (t Txn) Apply(v []int64) Outcome {
	o := Outcome{New: append([]int64(nil), v...), Changed: make([]bool, len(v))}
	set := func(i int, x int64) { o.New[i], o.Changed[i] = x, true }
	switch t.Type {
	case Balance:
	case DepositChecking:
		set(0, v[0]+t.Amount)
		o.Delta = t.Amount
	case TransactSavings:
		if v[0]+t.Amount < 0 {
			o.Declined = true
			break
		}
		set(0, v[0]+t.Amount)
		o.Delta = t.Amount
	case Amalgamate:
		set(0, 0)
		set(1, 0)
		set(2, v[2]+v[0]+v[1])
	case WriteCheck:
		amt := t.Amount
		if v[0]+v[1] < amt {
			amt += Overdraft
		}
		set(1, v[1]-amt)
		o.Delta = -amt
	case SendPayment:
		if v[0] < t.Amount {
			o.Declined = true
			break
		}
		set(0, v[0]-t.Amount)
		set(1, v[1]+t.Amount)
	}
	return o
}
