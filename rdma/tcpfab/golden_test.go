package tcpfab

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// TestOpEncodingGolden: the ops of every memory verb, their results and an
// error result, encoded and decoded back.
func TestOpEncodingGolden(t *testing.T) {
	var out strings.Builder
	for i, op := range goldenOps() {
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
	checkGolden(t, out.String())
}

// goldenOps are ops of every memory verb, narrow and wide, whose encoding
// the golden files pin (testdata/ops.golden): written before the op
// encoding moved into rdma/internal/wire (issue 34), so the move is proven
// byte for byte.
func goldenOps() []rdma.Op {
	addr := rdma.Addr{Region: 3, Offset: 0x0102030405060708}
	u := func(lo, hi uint64) rdma.U128 { return rdma.U128{Lo: lo, Hi: hi} }
	var ops []rdma.Op
	for _, wide := range []bool{false, true} {
		ops = append(ops,
			rdma.Op{Verb: rdma.VerbRead, Addr: addr, Buf: make([]byte, 5), Old: u(1, 2)},
			rdma.Op{Verb: rdma.VerbWrite, Addr: addr, Buf: []byte("abc")},
			rdma.Op{Verb: rdma.VerbCAS, Addr: addr, Wide: wide, Compare: u(0x11, 0x12), CompareMask: u(0x21, 0x22), Value: u(0x31, 0x32), Mask: u(0x41, 0x42), Old: u(0x51, 0x52)},
			rdma.Op{Verb: rdma.VerbMaskedCAS, Addr: addr, Wide: wide, Compare: u(1, 2), CompareMask: u(3, 4), Value: u(5, 6), Mask: u(7, 8), Old: u(9, 10)},
			rdma.Op{Verb: rdma.VerbFAA, Addr: addr, Wide: wide, Value: u(0x61, 0x62), Mask: u(0x71, 0x72), Old: u(0x81, 0x82)},
			rdma.Op{Verb: rdma.VerbMaskedFAA, Addr: addr, Wide: wide, Value: u(11, 12), Mask: u(13, 14), Old: u(15, 16)},
		)
	}
	return ops
}

func checkGolden(t *testing.T, got string) {
	t.Helper()
	path := filepath.Join("testdata", "ops.golden")
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("op encoding changed; got:\n%s\nwant:\n%s", got, want)
	}
}
