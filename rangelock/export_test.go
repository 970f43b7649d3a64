package rangelock

import (
	"context"
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

// TakeTurn takes node x's next ticket as a request on its way through the
// protocol does, and returns once the turn is its; pass gives it on. In
// between, the node shows a request ahead that has not occupied it.
func TakeTurn(ctx context.Context, ep rdma.Endpoint, t Tree, x uint64) (pass func() error, err error) {
	old, err := ep.MaskedFAA128(ctx, t.Addr(x), add(fTMax, 1), boundary)
	if err != nil {
		return nil, err
	}
	for {
		var buf [NodeSize]byte
		if err := ep.Read(ctx, t.Addr(x), buf[:]); err != nil {
			return nil, err
		}
		if get(fTCnt, word(buf[:])) == get(fTMax, old) {
			break
		}
	}
	return func() error {
		_, err := ep.MaskedFAA128(context.Background(), t.Addr(x), add(fTCnt, 1), boundary)
		return err
	}, nil
}
