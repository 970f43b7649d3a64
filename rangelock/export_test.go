package rangelock

import (
	"fmt"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// TreeBalanced checks that t, read from mem, is at rest: no leaf bit set,
// and at every internal node nobody occupies it, every ticket was served
// and every notification balanced. A tree nobody uses must be.
func TreeBalanced(t Tree, mem *rdma.Memory) error {
	var buf [NodeSize]byte
	for x := uint64(1); x <= t.Nodes(); x++ {
		if err := mem.Read(t.Addr(x).Offset, buf[:]); err != nil {
			return err
		}
		w := word(buf[:])
		if t.Leaf(x) {
			if w.Lo != 0 {
				return fmt.Errorf("leaf %d has bits %#x", x, w.Lo)
			}
			continue
		}
		if get(fX, w) != 0 || get(fS, w) != 0 || get(fTMax, w) != get(fTCnt, w) ||
			get(fDMaxX, w) != get(fDCntX, w) || get(fDMaxS, w) != get(fDCntS, w) {
			return fmt.Errorf("node %d not at rest: X %d S %d TMax %d TCnt %d DMaxX %d DCntX %d DMaxS %d DCntS %d", x,
				get(fX, w), get(fS, w), get(fTMax, w), get(fTCnt, w), get(fDMaxX, w), get(fDCntX, w), get(fDMaxS, w), get(fDCntS, w))
		}
	}
	return nil
}
