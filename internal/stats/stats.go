// Package stats holds the one summary the benchmark commands all report:
// the median of repeated runs.
package stats

import "slices"

// Number is what Median can average: counts, rates and time.Durations.
type Number interface {
	~int | ~int64 | ~float64
}

// Median is the median of xs (the mean of the two middle values for an even
// count; 0 for none). xs is not modified.
func Median[T Number](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
