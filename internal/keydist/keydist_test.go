package keydist

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestZipfMatchesItsLaw(t *testing.T) {
	const n, draws = 1000, 400000
	z := NewZipf(n, 0.99)
	r := rand.New(rand.NewPCG(1, 1))
	counts := make([]int, n)
	for i := 0; i < draws; i++ {
		k := z.Next(r)
		if k >= n {
			t.Fatalf("key %d out of range", k)
		}
		counts[k]++
	}
	var zetan float64
	for i := 1; i <= n; i++ {
		zetan += 1 / math.Pow(float64(i), 0.99)
	}
	// P(k) = (1/(k+1)^θ) / zeta(n). Check the head, where counts are large.
	for k := 0; k < 8; k++ {
		want := draws / math.Pow(float64(k+1), 0.99) / zetan
		if got := float64(counts[k]); math.Abs(got-want)/want > 0.05 {
			t.Errorf("key %d: %v draws, want about %.0f", k, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	for spec, want := range map[string]string{"uniform": "uniform", "zipf:0.99": "zipf-0.99", "zipf-1.2": "zipf-1.2", "hotspot:1:90": "hotspot-1%keys-90%ops"} {
		d, err := Parse(spec, 1000)
		if err != nil || d.String() != want {
			t.Errorf("Parse(%q) = %v, %v; want %s", spec, d, err, want)
		}
	}
	for _, bad := range []string{"zipf:0", "zipf:x", "gauss", "hotspot:a"} {
		if _, err := Parse(bad, 10); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	h := Hotspot{N: 100, HotKeys: 10, Frac: 0.9}
	r := rand.New(rand.NewPCG(2, 2))
	hot := 0
	for i := 0; i < 10000; i++ {
		if h.Next(r) < 10 {
			hot++
		}
	}
	if hot < 8800 || hot > 9200 {
		t.Fatalf("hotspot sent %d/10000 to the hot keys, want about 9000", hot)
	}
}
