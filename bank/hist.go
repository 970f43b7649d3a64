package bank

import (
	"fmt"
	"math"
	"math/bits"
)

// Hist is a latency histogram with HdrHistogram's layout: values up to
// 2·10^digits are counted exactly, and above that every power-of-two range
// is split into the same number of sub-buckets, so that each count is off by
// at most one part in 10^digits. The bank keeps its own rather than import
// hdrhistogram-go because it needs six operations of it (record, merge, max,
// percentiles, bars, a JSON snapshot), and the product's go.mod carries no
// dependency only a report needs. Its bucket indices, percentiles and
// snapshots are HdrHistogram's, value for value (bench/cmd/bankreport's
// TestHistMatchesHdrHistogram checks it against hdrhistogram-go), so result
// files written before still load.
//
// A Hist is not safe for concurrent use.
type Hist struct {
	lowest, highest int64
	digits          int64
	unitMagnitude   int64 // log2 of the lowest discernible value
	halfMagnitude   int32 // log2 of half the sub-buckets per bucket
	halfCount       int32
	subMask         int64
	counts          []int64
	total           int64
}

// NewHist returns an empty histogram for values from lowest to highest,
// to digits significant decimal digits (1 to 5).
func NewHist(lowest, highest int64, digits int) *Hist {
	digits = min(max(digits, 1), 5)
	lowest = max(lowest, 1)
	h := geometry(lowest, highest, digits)
	h.counts = make([]int64, h.countsLen())
	return h
}

func geometry(lowest, highest int64, digits int) *Hist {
	// Unit resolution up to 2·10^digits: at 1000 with three digits a count
	// may be off by one, at 2000 by two, never at 1999 by two.
	subCountMagnitude := int32(math.Ceil(math.Log2(2 * math.Pow10(digits))))
	half := max(subCountMagnitude, 1) - 1
	unit := max(int64(math.Floor(math.Log2(float64(lowest)))), 0)
	subCount := int32(1) << (half + 1)
	return &Hist{
		lowest: lowest, highest: highest, digits: int64(digits),
		unitMagnitude: unit, halfMagnitude: half, halfCount: subCount / 2,
		subMask: int64(subCount-1) << unit,
	}
}

// countsLen is (buckets + 1) half-buckets: bucket 0 uses both halves of its
// sub-buckets, every higher bucket only its upper half, since its lower half
// is the bucket below at twice the resolution.
func (h *Hist) countsLen() int {
	smallestUntrackable := int64(2*h.halfCount) << h.unitMagnitude
	buckets := int32(1)
	for smallestUntrackable <= h.highest {
		if smallestUntrackable > math.MaxInt64/2 {
			buckets++
			break
		}
		smallestUntrackable <<= 1
		buckets++
	}
	return int(buckets+1) * int(h.halfCount)
}

func (h *Hist) bucketOf(v int64) int32 {
	pow2Ceiling := int64(64 - bits.LeadingZeros64(uint64(v|h.subMask)))
	return int32(pow2Ceiling - h.unitMagnitude - int64(h.halfMagnitude+1))
}

func (h *Hist) index(v int64) int {
	b := h.bucketOf(v)
	sub := int32(v >> (int64(b) + h.unitMagnitude))
	return int((b+1)<<h.halfMagnitude + sub - h.halfCount)
}

// valueAt is the lowest value counted at flat index i.
func (h *Hist) valueAt(i int) int64 {
	b := int32(i)>>h.halfMagnitude - 1
	sub := int32(i)&(h.halfCount-1) + h.halfCount
	if b < 0 {
		sub -= h.halfCount
		b = 0
	}
	return int64(sub) << (int64(b) + h.unitMagnitude)
}

// lowestEquivalent and highestEquivalent bound the values counted with v.
func (h *Hist) lowestEquivalent(v int64) int64 {
	b := h.bucketOf(v)
	return (v >> (int64(b) + h.unitMagnitude)) << (int64(b) + h.unitMagnitude)
}

func (h *Hist) highestEquivalent(v int64) int64 {
	b := h.bucketOf(v)
	sub := int32(v >> (int64(b) + h.unitMagnitude))
	if sub >= 2*h.halfCount {
		b++
	}
	return h.lowestEquivalent(v) + int64(1)<<(int64(b)+h.unitMagnitude) - 1
}

// Record counts one value; a negative value or one above the range is an
// error and leaves the histogram as it was.
func (h *Hist) Record(v int64) error { return h.recordN(v, 1) }

func (h *Hist) recordN(v, n int64) error {
	if v < 0 {
		return fmt.Errorf("value %d is negative and cannot be recorded", v)
	}
	i := h.index(v)
	if uint(i) >= uint(len(h.counts)) {
		return fmt.Errorf("value %d is too large to be recorded", v)
	}
	if n < 0 || n > math.MaxInt64-h.total {
		return fmt.Errorf("cannot record %d more values", n)
	}
	h.counts[i] += n
	h.total += n
	return nil
}

// Merge adds o's counts to h and returns how many values fell outside h's
// range and were dropped.
func (h *Hist) Merge(o *Hist) (dropped int64) {
	for i, c := range o.counts {
		if c != 0 && h.recordN(o.valueAt(i), c) != nil {
			dropped += c
		}
	}
	return dropped
}

// TotalCount is the number of values recorded.
func (h *Hist) TotalCount() int64 { return h.total }

// Max is the highest value equivalent to the largest one recorded.
func (h *Hist) Max() int64 {
	var m int64
	for i := len(h.counts) - 1; i >= 0; i-- {
		if h.counts[i] != 0 {
			m = h.highestEquivalent(h.valueAt(i))
			break
		}
	}
	return h.highestEquivalent(m)
}

// ValueAtPercentiles returns, for each percentile p in [0, 100], the
// highest value equivalent to the one at rank ⌊p/100·total + ½⌋ (the lowest
// for p = 0); all zero when nothing was recorded.
func (h *Hist) ValueAtPercentiles(ps []float64) map[float64]int64 {
	out := make(map[float64]int64, len(ps))
	for _, p := range ps {
		out[p] = 0
		if h.total == 0 {
			continue
		}
		rank := percentileRank(p, h.total)
		var cum int64
		for i, c := range h.counts {
			if cum += c; cum >= rank {
				if v := h.valueAt(i); p <= 0 {
					out[p] = h.lowestEquivalent(v)
				} else {
					out[p] = h.highestEquivalent(v)
				}
				break
			}
		}
	}
	return out
}

// percentileRank is a rank in [1, total], computed in floating point and
// clamped before conversion so that rounding cannot pass the last value.
func percentileRank(p float64, total int64) int64 {
	rank := min(p, 100)/100*float64(total) + 0.5
	switch {
	case !(rank >= 1):
		return 1
	case rank >= float64(total):
		return total
	}
	return int64(rank)
}

// A Bar is the count of the values from From to To, both included.
type Bar struct{ From, To, Count int64 }

// Distribution returns the bars in value order, from the lowest value up to
// the bar of the largest recorded value, empty ones included.
func (h *Hist) Distribution() []Bar {
	var bars []Bar
	var cum int64
	for i, c := range h.counts {
		if cum >= h.total {
			break
		}
		cum += c
		v := h.valueAt(i)
		bars = append(bars, Bar{From: h.lowestEquivalent(v), To: h.highestEquivalent(v), Count: c})
	}
	return bars
}

// HistSnapshot is a Hist as saved in a result file. Its fields are those of
// hdrhistogram-go's Snapshot, so either reads what the other wrote.
type HistSnapshot struct {
	LowestTrackableValue  int64
	HighestTrackableValue int64
	SignificantFigures    int64
	Counts                []int64
}

// Export copies the histogram into a snapshot.
func (h *Hist) Export() *HistSnapshot {
	return &HistSnapshot{h.lowest, h.highest, h.digits, append([]int64(nil), h.counts...)}
}

// ImportHist rebuilds a histogram from a snapshot. Counts beyond the
// snapshot's range, and negative ones, are dropped, so that a damaged file
// cannot make the total disagree with the counts.
func ImportHist(s *HistSnapshot) *Hist {
	h := NewHist(s.LowestTrackableValue, s.HighestTrackableValue, int(s.SignificantFigures))
	copy(h.counts, s.Counts)
	for i, c := range h.counts {
		if c < 0 || c > math.MaxInt64-h.total {
			h.counts[i] = 0
			continue
		}
		h.total += c
	}
	return h
}
