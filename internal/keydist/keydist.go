// Package keydist draws keys from the distributions the benchmarks use:
// uniform, Zipfian with any θ (including the 0.99 the papers use, which
// math/rand's Zipf cannot express), and hotspot (a fraction of the requests
// on a fraction of the keys).
package keydist

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Dist draws key indexes in [0, n).
type Dist interface {
	Next(r *rand.Rand) uint64
	String() string
}

// Uniform draws every key with equal probability.
type Uniform struct{ N uint64 }

func (u Uniform) Next(r *rand.Rand) uint64 { return r.Uint64N(u.N) }
func (u Uniform) String() string           { return "uniform" }

// Zipf draws key i with probability proportional to 1/(i+1)^θ; key 0 is
// the hottest. It samples exactly by rejection-inversion (Hörmann and
// Derflinger, 1996): O(1) per draw with no table, for any θ > 0.
type Zipf struct {
	n, theta     float64
	hx1, hn, sqz float64
}

// NewZipf prepares a Zipfian over n keys with skew θ > 0.
func NewZipf(n uint64, theta float64) *Zipf {
	if theta <= 0 || n == 0 {
		panic(fmt.Sprintf("keydist: zipf over %d keys with theta %v", n, theta))
	}
	z := &Zipf{n: float64(n), theta: theta}
	z.hx1 = z.hIntegral(1.5) - 1
	z.hn = z.hIntegral(z.n + 0.5)
	z.sqz = 2 - z.hIntegralInv(z.hIntegral(2.5)-z.h(2))
	return z
}

func (z *Zipf) Next(r *rand.Rand) uint64 {
	for {
		u := z.hn + r.Float64()*(z.hx1-z.hn)
		x := z.hIntegralInv(u)
		k := math.Floor(x + 0.5)
		if k < 1 {
			k = 1
		} else if k > z.n {
			k = z.n
		}
		if k-x <= z.sqz || u >= z.hIntegral(k+0.5)-z.h(k) {
			return uint64(k) - 1
		}
	}
}

func (z *Zipf) String() string { return "zipf-" + strconv.FormatFloat(z.theta, 'f', -1, 64) }

func (z *Zipf) h(x float64) float64 { return math.Exp(-z.theta * math.Log(x)) }

// hIntegral is the integral of h from 1 to x, written so it stays accurate
// as θ approaches 1.
func (z *Zipf) hIntegral(x float64) float64 {
	lx := math.Log(x)
	return expm1Over((1-z.theta)*lx) * lx
}

func (z *Zipf) hIntegralInv(x float64) float64 {
	t := x * (1 - z.theta)
	if t < -1 {
		t = -1
	}
	return math.Exp(log1pOver(t) * x)
}

// expm1Over is (e^x - 1)/x, and log1pOver is log(1+x)/x, both continuous at 0.
func expm1Over(x float64) float64 {
	if math.Abs(x) > 1e-8 {
		return math.Expm1(x) / x
	}
	return 1 + x/2*(1+x/3*(1+x/4))
}

func log1pOver(x float64) float64 {
	if math.Abs(x) > 1e-8 {
		return math.Log1p(x) / x
	}
	return 1 - x*(0.5-x*(1.0/3-0.25*x))
}

// Hotspot sends Frac of the draws to the first HotKeys keys, the rest
// uniformly over the others.
type Hotspot struct {
	N, HotKeys uint64
	Frac       float64
}

func (h Hotspot) Next(r *rand.Rand) uint64 {
	if r.Float64() < h.Frac || h.HotKeys >= h.N {
		return r.Uint64N(h.HotKeys)
	}
	return h.HotKeys + r.Uint64N(h.N-h.HotKeys)
}

func (h Hotspot) String() string {
	return fmt.Sprintf("hotspot-%g%%keys-%g%%ops", 100*float64(h.HotKeys)/float64(h.N), 100*h.Frac)
}

// Parse reads "uniform", "zipf:0.99" (or "zipf-0.99") or
// "hotspot:1:90" (1% of the keys get 90% of the draws) for n keys.
func Parse(spec string, n uint64) (Dist, error) {
	spec = strings.ReplaceAll(spec, "-", ":")
	parts := strings.Split(spec, ":")
	switch parts[0] {
	case "uniform":
		return Uniform{N: n}, nil
	case "zipf":
		theta := 0.99
		if len(parts) > 1 {
			v, err := strconv.ParseFloat(parts[1], 64)
			if err != nil {
				return nil, fmt.Errorf("keydist: zipf theta %q: %w", parts[1], err)
			}
			theta = v
		}
		if theta <= 0 {
			return nil, fmt.Errorf("keydist: zipf theta %v must be > 0", theta)
		}
		return NewZipf(n, theta), nil
	case "hotspot":
		keys, ops := 1.0, 90.0
		var err error
		if len(parts) > 1 {
			if keys, err = strconv.ParseFloat(parts[1], 64); err != nil {
				return nil, fmt.Errorf("keydist: hotspot keys %%: %w", err)
			}
		}
		if len(parts) > 2 {
			if ops, err = strconv.ParseFloat(parts[2], 64); err != nil {
				return nil, fmt.Errorf("keydist: hotspot ops %%: %w", err)
			}
		}
		hot := uint64(float64(n) * keys / 100)
		if hot == 0 {
			hot = 1
		}
		return Hotspot{N: n, HotKeys: hot, Frac: ops / 100}, nil
	}
	return nil, fmt.Errorf("keydist: unknown distribution %q (want uniform, zipf:θ or hotspot:keys%%:ops%%)", spec)
}
