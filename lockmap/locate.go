package lockmap

import "github.com/cespare/xxhash/v2"

// Locate maps a key to its memory node and lock-table entry. It is the same
// on every proxy and every run, given the same list of memory nodes (in the
// same order) and the same table sizes:
//
//	h      = xxhash64(key)
//	domain = jump(h, len(domains))        (Lamping & Veach jump hash)
//	entry  = (h >> 16) mod entries(domain)
//
// Jump hash moves only 1/n of the keys when a memory node is added at the
// end of the list. The entry uses bits the jump hash barely depends on, so
// keys that share a memory node still spread over its whole table. Two keys
// that land on one entry share one lock: correct, but they exclude each
// other (see docs/compatibility.md).
func Locate(key string, entries []uint64) (domain int, entry uint64) {
	h := xxhash.Sum64String(key)
	domain = jump(h, len(entries))
	return domain, (h >> 16) % entries[domain]
}

// jump is Lamping and Veach's jump consistent hash.
func jump(key uint64, buckets int) int {
	var b, j int64 = -1, 0
	for j < int64(buckets) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}
