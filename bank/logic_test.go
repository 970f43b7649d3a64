package bank

import (
	"math"
	"slices"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/internal/keydist"
	"github.com/shiftlock/shiftlock-proxy/lockmap"
)

func TestApply(t *testing.T) {
	cases := []struct {
		name     string
		t        Txn
		in, out  []int64
		delta    int64
		declined bool
	}{
		{"balance", Txn{Type: Balance, A: 1}, []int64{5, 7}, []int64{5, 7}, 0, false},
		{"deposit", Txn{Type: DepositChecking, A: 1, Amount: 30}, []int64{7}, []int64{37}, 30, false},
		{"savings deposit", Txn{Type: TransactSavings, A: 1, Amount: 30}, []int64{5}, []int64{35}, 30, false},
		{"savings withdrawal", Txn{Type: TransactSavings, A: 1, Amount: -5}, []int64{5}, []int64{0}, -5, false},
		{"savings overdraw declined", Txn{Type: TransactSavings, A: 1, Amount: -6}, []int64{5}, []int64{5}, 0, true},
		{"amalgamate", Txn{Type: Amalgamate, A: 1, B: 2}, []int64{5, 7, 11}, []int64{0, 0, 23}, 0, false},
		{"amalgamate overdrawn", Txn{Type: Amalgamate, A: 1, B: 2}, []int64{5, -7, 11}, []int64{0, 0, 9}, 0, false},
		{"check covered", Txn{Type: WriteCheck, A: 1, Amount: 12}, []int64{5, 7}, []int64{5, -5}, -12, false},
		{"check bounces", Txn{Type: WriteCheck, A: 1, Amount: 13}, []int64{5, 7}, []int64{5, 7 - 13 - Overdraft}, -13 - Overdraft, false},
		{"payment", Txn{Type: SendPayment, A: 1, B: 2, Amount: 7}, []int64{7, 1}, []int64{0, 8}, 0, false},
		{"payment declined", Txn{Type: SendPayment, A: 1, B: 2, Amount: 8}, []int64{7, 1}, []int64{7, 1}, 0, true},
	}
	for _, c := range cases {
		if len(c.t.Keys()) != len(c.in) {
			t.Fatalf("%s: %d keys for %d values", c.name, len(c.t.Keys()), len(c.in))
		}
		o := c.t.Apply(c.in)
		if !slices.Equal(o.New, c.out) || o.Delta != c.delta || o.Declined != c.declined {
			t.Errorf("%s: got %v delta %d declined %v, want %v delta %d declined %v", c.name, o.New, o.Delta, o.Declined, c.out, c.delta, c.declined)
		}
		var before, after int64
		for i := range c.in {
			before += c.in[i]
			after += o.New[i]
			if o.New[i] != c.in[i] && !o.Changed[i] {
				t.Errorf("%s: key %d changed but not marked", c.name, i)
			}
		}
		if after-before != o.Delta {
			t.Errorf("%s: money moved by %d, delta says %d", c.name, after-before, o.Delta)
		}
	}
}

func TestGeneratorMix(t *testing.T) {
	for name, mix := range Mixes {
		g := NewGenerator(mix, keydist.Uniform{N: 100}, 100, 7)
		const n = 200_000
		var count [NumTxnTypes]int
		for range n {
			x := g.Next()
			count[x.Type]++
			if x.A >= 100 || (x.Type.Accounts() == 2 && (x.B >= 100 || x.B == x.A)) {
				t.Fatalf("%s: bad accounts in %+v", name, x)
			}
			if x.Amount == 0 && (x.Type == DepositChecking || x.Type == SendPayment || x.Type == WriteCheck || x.Type == TransactSavings) {
				t.Fatalf("%s: zero amount in %+v", name, x)
			}
			if abs(x.Amount) > MaxAmount {
				t.Fatalf("%s: amount out of range in %+v", name, x)
			}
		}
		for typ, p := range mix {
			got := 100 * float64(count[typ]) / n
			if math.Abs(got-p) > 0.5 {
				t.Errorf("%s: %s is %.2f%% of transactions, want %g%%", name, TxnType(typ), got, p)
			}
		}
	}
}

func TestScrambleIsABijection(t *testing.T) {
	for _, n := range []uint64{2, 10, 97, 1000, 1 << 10, 1_000_000} {
		s := scramble(keydist.Uniform{N: n}, n)
		seen := make([]bool, n)
		for r := uint64(0); r < n; r++ {
			lo := mulmod(r, s.m, n)
			if seen[lo] {
				t.Fatalf("n=%d: rank %d maps to account %d twice", n, r, lo)
			}
			seen[lo] = true
		}
	}
}

func TestScrambleSpreadsHotAccounts(t *testing.T) {
	// The hottest Zipf ranks must not all be the lowest account numbers,
	// or ascending lock order would always take the hot lock first.
	s := scramble(keydist.NewZipf(1_000_000, 0.99), 1_000_000)
	low := 0
	for r := uint64(0); r < 100; r++ {
		if mulmod(r, s.m, 1_000_000) < 500_000 {
			low++
		}
	}
	if low < 30 || low > 70 {
		t.Fatalf("%d of the 100 hottest accounts are in the lower half", low)
	}
}

func TestLockReqsAreOrdered(t *testing.T) {
	for _, x := range []Txn{{Type: SendPayment, A: 9, B: 10}, {Type: Amalgamate, A: 10, B: 9}} {
		r := x.LockReqs()
		if len(r) != 2 || r[0].Key != "lock:acct:9" || r[1].Key != "lock:acct:10" || r[0].Mode != Exclusive {
			t.Fatalf("%+v: %+v", x, r)
		}
	}
	if r := (Txn{Type: Balance, A: 3}).LockReqs(); len(r) != 1 || r[0].Mode != Shared {
		t.Fatalf("balance: %+v", r)
	}
}

func TestNativePlanOrdersAndMergesEntries(t *testing.T) {
	l := &NativeLocker{entries: []uint64{4, 4}} // tiny tables: keys collide
	var reqs []LockReq
	for i := range uint64(40) {
		m := Shared
		if i%3 == 0 {
			m = Exclusive
		}
		reqs = append(reqs, LockReq{LockKey(i), m})
	}
	plan := l.plan(reqs)
	if len(plan) > 8 {
		t.Fatalf("%d locks for 8 entries", len(plan))
	}
	for i := 1; i < len(plan); i++ {
		a, b := plan[i-1], plan[i]
		if a.dom > b.dom || (a.dom == b.dom && a.entry >= b.entry) {
			t.Fatalf("plan not strictly ordered: %+v", plan)
		}
	}
	// Exclusive wins when an entry is wanted both ways.
	for _, p := range plan {
		want := Shared
		for _, r := range reqs {
			d, e := lockmap.Locate(r.Key, l.entries)
			if d == p.dom && e == p.entry && r.Mode == Exclusive {
				want = Exclusive
			}
		}
		if p.mode != want {
			t.Fatalf("entry %d/%d: mode %v, want %v", p.dom, p.entry, p.mode, want)
		}
	}
}

func TestAuditCheck(t *testing.T) {
	a := Audit{Before: Snapshot{Total: 1000}, After: Snapshot{Total: 1050}, Deltas: 50}
	a.Check()
	if !a.OK {
		t.Fatalf("balanced books fail: %v", a.Problems)
	}
	a = Audit{Before: Snapshot{Total: 1000}, After: Snapshot{Total: 990}, Deltas: 0}
	a.Check()
	if a.OK || a.Mismatch != -10 {
		t.Fatalf("lost money not caught: %+v", a)
	}
	a = Audit{Before: Snapshot{Total: 1000}, After: Snapshot{Total: 1000, NegativeSavings: 1, MinSavings: -3}}
	a.Check()
	if a.OK {
		t.Fatal("negative savings not caught")
	}
	a = Audit{Before: Snapshot{Total: 1000}, After: Snapshot{Total: 1000}, Overdrawn: 2}
	a.Check()
	if a.OK {
		t.Fatal("an overdraft repaired before the scan not caught")
	}
}

func TestCents(t *testing.T) {
	for c, want := range map[int64]string{0: "$0.00", 5: "$0.05", -105: "-$1.05", 123456789: "$1,234,567.89"} {
		if got := Cents(c); got != want {
			t.Errorf("Cents(%d) = %q, want %q", c, got, want)
		}
	}
}

func TestOverdrawn(t *testing.T) {
	w := []string{SavingsKey(1), CheckingKey(2)}
	for _, c := range []struct {
		after []int64
		want  bool
	}{{[]int64{0, -5}, false}, {[]int64{-1, 5}, true}, {[]int64{3}, false}, {nil, false}} {
		if got := overdrawn(w, c.after); got != c.want {
			t.Errorf("overdrawn(%v, %v) = %v, want %v", w, c.after, got, c.want)
		}
	}
}
