// Package wiretest holds what the fabrics' tests of their op encodings
// share: sample ops and the golden-file check.
package wiretest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// Ops are ops of every memory verb, narrow and wide, with operands and old
// values that differ in every word, so that a byte out of place shows.
func Ops() []rdma.Op {
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

// Golden compares got with the package's testdata/ops.golden, which it
// rewrites first when UPDATE_GOLDEN is set. The tcpfab and verbs files were
// written before their op encoding moved into rdma/internal/wire (issue
// 34), so that the move is proven byte for byte.
func Golden(t *testing.T, got string) {
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
