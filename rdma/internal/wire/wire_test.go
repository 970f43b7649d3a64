package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

var errShort = errors.New("short")

// FuzzOp: decoding any bytes as an op never panics, and an op that decodes
// completely encodes back to the bytes it came from.
func FuzzOp(f *testing.F) {
	addr := rdma.Addr{Region: 2, Offset: 64}
	for _, op := range []rdma.Op{
		{Verb: rdma.VerbRead, Addr: addr, Buf: make([]byte, 8)},
		{Verb: rdma.VerbWrite, Addr: addr, Buf: []byte("abc")},
		{Verb: rdma.VerbMaskedCAS, Addr: addr, Wide: true, Compare: rdma.U128{Lo: 1, Hi: 2}},
		{Verb: rdma.VerbFAA, Addr: addr, Value: rdma.U64(3)},
	} {
		flags := uint8(0)
		if op.Wide {
			flags = FlagWide
		}
		f.Add(AppendOp(nil, &op, flags))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		d := Decoder{B: p, Short: errShort}
		var op rdma.Op
		flags := DecodeOpHeader(&d, &op)
		op.Wide = flags&FlagWide != 0
		n := DecodeOperands(&d, &op)
		if d.Err != nil {
			return
		}
		if op.Verb == rdma.VerbRead {
			if n > 1<<16 {
				return // the fabrics refuse larger reads before they allocate
			}
			op.Buf = make([]byte, n)
		}
		used := p[:len(p)-len(d.B)]
		if got := AppendOp(nil, &op, flags); !bytes.Equal(got, used) {
			t.Fatalf("%x decoded as %+v encodes as %x", used, op, got)
		}
	})
}

func TestResultRoundTrip(t *testing.T) {
	for _, op := range []rdma.Op{
		{Verb: rdma.VerbRead, Buf: []byte("data")},
		{Verb: rdma.VerbWrite},
		{Verb: rdma.VerbCAS, Old: rdma.U64(7)},
		{Verb: rdma.VerbMaskedFAA, Wide: true, Old: rdma.U128{Lo: 1, Hi: 2}},
	} {
		b := AppendResult(nil, &op)
		d := Decoder{B: b[1:], Short: errShort}
		back := rdma.Op{Verb: op.Verb, Wide: op.Wide, Buf: make([]byte, len(op.Buf))}
		DecodeResult(&d, &back)
		if b[0] != StatusOK || d.Done(func(int) error { return errShort }) != nil || !reflect.DeepEqual(back.Old, op.Old) || !bytes.Equal(back.Buf, op.Buf) {
			t.Errorf("%v: %x read back as %+v", op.Verb, b, back)
		}
	}
	d := Decoder{B: []byte{1, 2}, Short: errShort}
	if d.U32(); d.Err != errShort || d.U8() != 0 {
		t.Errorf("a short read did not stick: %v", d.Err)
	}
}
