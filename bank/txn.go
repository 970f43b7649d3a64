package bank

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/shiftlock/shiftlock-proxy/internal/keydist"
)

// TxnType is one of the six SmallBank transactions.
type TxnType uint8

const (
	Amalgamate TxnType = iota
	Balance
	DepositChecking
	SendPayment
	TransactSavings
	WriteCheck
	NumTxnTypes
)

var txnNames = [NumTxnTypes]string{"Amalgamate", "Balance", "DepositChecking", "SendPayment", "TransactSavings", "WriteCheck"}

func (t TxnType) String() string {
	if t < NumTxnTypes {
		return txnNames[t]
	}
	return "TxnType(" + strconv.Itoa(int(t)) + ")"
}

// ReadOnly reports whether t writes nothing (it takes shared locks where the
// locker has them).
func (t TxnType) ReadOnly() bool { return t == Balance }

// Accounts is how many distinct accounts t touches.
func (t TxnType) Accounts() int {
	if t == Amalgamate || t == SendPayment {
		return 2
	}
	return 1
}

// Mix is the share of each transaction type, in percent.
type Mix [NumTxnTypes]float64

// Mixes by name: SmallBank's classic mix, and FissLock's mobile banking app
// (90% balance checks, 10% transfers).
var Mixes = map[string]Mix{
	"smallbank": {Amalgamate: 15, Balance: 15, DepositChecking: 15, SendPayment: 25, TransactSavings: 15, WriteCheck: 15},
	"mobile":    {Balance: 90, SendPayment: 10},
}

// ParseMix reads a mix name.
func ParseMix(name string) (Mix, error) {
	m, ok := Mixes[name]
	if !ok {
		return Mix{}, fmt.Errorf("bank: unknown mix %q (want smallbank or mobile)", name)
	}
	return m, nil
}

func (m Mix) String() string {
	var parts []string
	for t, p := range m {
		if p > 0 {
			parts = append(parts, fmt.Sprintf("%s %g%%", TxnType(t), p))
		}
	}
	return strings.Join(parts, ", ")
}

// Txn is one transaction: its type, its accounts (B only for the two-account
// types) and its amount in cents.
type Txn struct {
	Type   TxnType
	A, B   uint64
	Amount int64
}

// MaxAmount bounds transaction amounts, in cents ($100.00).
const MaxAmount = 10_000

// Generator draws transactions from a mix, with accounts from a key
// distribution. It is not safe for concurrent use; give each client one.
type Generator struct {
	mix  Mix
	dist scrambled
	r    *rand.Rand
	cum  [NumTxnTypes]float64
}

// scrambled spreads a distribution's ranks over the accounts, as YCSB's
// scrambled Zipfian does: keydist makes account 0 the hottest, and since
// locks are taken in ascending account order, an unscrambled skew would
// always take a transaction's hottest lock first and hold it while waiting
// for the other one, the worst case for every locker. Scrambled, the hot
// lock comes first or second with even odds, as with real account numbers.
type scrambled struct {
	d    keydist.Dist
	n, m uint64
}

func scramble(d keydist.Dist, n uint64) scrambled {
	m := uint64(2654435761) % n // Knuth's multiplicative hash constant
	for m == 0 || gcd(m, n) != 1 {
		m++
	}
	return scrambled{d, n, m}
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// next maps rank r to account r*m mod n, a bijection since gcd(m, n) = 1.
func (s scrambled) next(r *rand.Rand) uint64 { return mulmod(s.d.Next(r), s.m, s.n) }

// mulmod is a*b mod n without overflow.
func mulmod(a, b, n uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	_, rem := bits.Div64(hi%n, lo, n)
	return rem
}

// NewGenerator returns a generator over n accounts seeded with seed; dist
// draws ranks in [0, n).
func NewGenerator(mix Mix, dist keydist.Dist, n, seed uint64) *Generator {
	g := &Generator{mix: mix, dist: scramble(dist, n), r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	var sum float64
	for t, p := range mix {
		sum += p
		g.cum[t] = sum
	}
	last := 0
	for t := range g.cum {
		g.cum[t] /= sum
		if mix[t] > 0 {
			last = t
		}
	}
	// Rounding must not leave a sliver above the last type with a share.
	for t := last; t < len(g.cum); t++ {
		g.cum[t] = 1
	}
	return g
}

// Next draws a transaction. The two accounts of a two-account transaction
// are distinct, both drawn from the distribution.
func (g *Generator) Next() Txn {
	u := g.r.Float64()
	t := TxnType(0)
	for t < NumTxnTypes-1 && u >= g.cum[t] {
		t++
	}
	x := Txn{Type: t, A: g.dist.next(g.r)}
	if t.Accounts() == 2 {
		for x.B = g.dist.next(g.r); x.B == x.A; x.B = g.dist.next(g.r) {
		}
	}
	switch t {
	case DepositChecking, SendPayment, WriteCheck:
		x.Amount = 1 + g.r.Int64N(MaxAmount)
	case TransactSavings:
		// Deposits and withdrawals alike; a withdrawal that would overdraw
		// savings is declined.
		x.Amount = 1 + g.r.Int64N(MaxAmount)
		if g.r.IntN(2) == 0 {
			x.Amount = -x.Amount
		}
	}
	return x
}
