package tcpfab

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/internal/wire/wiretest"
)

// TestOpEncodingGolden: the ops of every memory verb, their results and an
// error result, encoded and decoded back.
func TestOpEncodingGolden(t *testing.T) {
	var out strings.Builder
	for i, op := range wiretest.Ops() {
		req := appendOp(nil, &op)
		var w wireOp
		d := newDecoder(req)
		decodeOp(&d, &w)
		fmt.Fprintf(&out, "%d %v wide=%v op %s decoded err=%v readLen=%d\n", i, op.Verb, op.Wide, hex.EncodeToString(req), d.Done(trailing), w.readLen)
		res := appendOpResult(nil, &op, 64)
		back := rdma.Op{Verb: op.Verb, Wide: op.Wide, Buf: make([]byte, len(op.Buf))}
		rd := newDecoder(res)
		err := decodeOpResult(&rd, &back)
		fmt.Fprintf(&out, "%d result %s decoded old=%v err=%v\n", i, hex.EncodeToString(res), back.Old, err)
	}
	failed := rdma.Op{Verb: rdma.VerbCAS, Err: fmt.Errorf("%w: bad", rdma.ErrBadRequest)}
	fmt.Fprintf(&out, "error result %s\n", hex.EncodeToString(appendOpResult(nil, &failed, 64)))
	wiretest.Golden(t, out.String())
}
