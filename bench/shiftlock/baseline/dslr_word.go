package baseline

import (
	"fmt"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// DSLR's 64-bit lock word {nX, nS, maxX, maxS} (DSLR Fig. 3), 16 bits each,
// nX most significant. It is the first word of a lock-table entry; the
// second word is unused. The word is changed only by the standard 8-byte FAA
// and CAS DSLR was built on: a field never carries into its neighbour,
// because no field ever exceeds COUNT_MAX plus the number of clients, far
// below 2^16.
var (
	fMaxS = rdma.NewField(0, 16)
	fMaxX = rdma.NewField(16, 16)
	fNS   = rdma.NewField(32, 16)
	fNX   = rdma.NewField(48, 16)
)

// DefaultCountMax is DSLR's COUNT_MAX: tickets are handed out up to it, then
// the word is reset to zero (DSLR §4.9).
const DefaultCountMax = 32768

type dslrWord struct{ nX, nS, maxX, maxS uint64 }

func decodeDSLR(w uint64) dslrWord {
	v := rdma.U64(w)
	return dslrWord{nX: fNX.Get(v), nS: fNS.Get(v), maxX: fMaxX.Get(v), maxS: fMaxS.Get(v)}
}

func (d dslrWord) encode() uint64 {
	return fNX.Value(d.nX).Or(fNS.Value(d.nS)).Or(fMaxX.Value(d.maxX)).Or(fMaxS.Value(d.maxS)).Lo
}

func (d dslrWord) String() string {
	return fmt.Sprintf("{nX=%d nS=%d maxX=%d maxS=%d}", d.nX, d.nS, d.maxX, d.maxS)
}

// inc is the 8-byte FAA addend that adds one to f; dec subtracts one from a
// field known to be non-zero (two's complement over the whole word, so the
// borrow stays inside f).
func inc(f rdma.Field) uint64 { return f.Value(1).Lo }
func dec(f rdma.Field) uint64 { return -f.Value(1).Lo }
