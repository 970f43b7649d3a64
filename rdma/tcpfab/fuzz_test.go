package tcpfab

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

func frame(typ uint8, count uint16, id uint32, body []byte) []byte {
	b := appendHeader(nil, header{Len: uint32(len(body)), Type: typ, Count: count, ID: id})
	return append(b, body...)
}

func sampleOps() []rdma.Op {
	var b rdma.Batch
	a := rdma.Addr{Region: rdma.RegionLocks, Offset: 32}
	b.Read(a, make([]byte, 16))
	b.Write(a, []byte("0123456789abcdef"))
	b.CAS(a, 1, 2)
	b.FAA(a, 3)
	b.MaskedCAS64(a, 4, 5, 6, 7)
	b.MaskedFAA64(a, 8, 9)
	b.MaskedCAS128(a, rdma.U128{Lo: 1, Hi: 2}, rdma.U128{Lo: 3, Hi: 4}, rdma.U128{Lo: 5, Hi: 6}, rdma.U128{Lo: 7, Hi: 8})
	b.MaskedFAA128(a, rdma.U128{Lo: 9, Hi: 10}, rdma.U128{Lo: 11, Hi: 12})
	return b.Ops
}

// FuzzFrame feeds arbitrary bytes to the frame reader and the verb decoders.
// Nothing may panic, and whatever decodes must encode back to the same bytes
// (the encoding is canonical, so a valid frame round-trips).
func FuzzFrame(f *testing.F) {
	ops := sampleOps()
	var body []byte
	for i := range ops {
		body = appendOp(body, &ops[i])
	}
	f.Add(frame(tBatch, uint16(len(ops)), 7, body))
	one := appendOp(nil, &ops[6])
	f.Add(frame(tVerb, 1, 1, one))
	f.Add(append(frame(tVerb, 1, 1, one), frame(tPeers, 0, 2, nil)...))
	f.Add(frame(tVerbReply, 1, 1, appendOpResult(nil, &rdma.Op{Verb: rdma.VerbMaskedCAS, Wide: true, Old: rdma.U128{Lo: 1, Hi: 2}}, 100)))
	f.Add(frame(tError, 0, 3, appendError(nil, rdma.ErrOutOfBounds, 100)))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add(binary.LittleEndian.AppendUint32(nil, MaxFrame+1))
	f.Fuzz(func(t *testing.T, data []byte) {
		fr := newFrameReader(bytes.NewReader(data))
		for {
			h, body, err := fr.next()
			if err != nil {
				return
			}
			if h.Len != uint32(len(body)) || h.Len > MaxFrame {
				t.Fatalf("header says %d bytes, body has %d", h.Len, len(body))
			}
			checkOps(t, h, body)
			checkResults(body)
		}
	})
}

// checkOps decodes body as request ops and, if that succeeds, checks that
// encoding them again gives back body.
func checkOps(t *testing.T, h header, body []byte) {
	if int(h.Count)*minOpSize > len(body) {
		return // the server refuses these before decoding
	}
	d := newDecoder(body)
	ops := make([]wireOp, h.Count)
	for i := range ops {
		decodeOp(&d, &ops[i])
	}
	if d.Done(trailing) != nil {
		return
	}
	var again []byte
	for i := range ops {
		op := ops[i].Op
		if op.Verb == rdma.VerbRead {
			op.Buf = make([]byte, ops[i].readLen)
		}
		if n := opReqSize(&op); n < 0 {
			t.Fatalf("decoded an op that cannot be encoded: %+v", op)
		}
		again = appendOp(again, &op)
	}
	if !bytes.Equal(again, body) {
		t.Fatalf("ops do not round-trip:\n in %x\nout %x", body, again)
	}
}

// checkResults decodes body as results of a plausible batch; it must not
// panic whatever the bytes.
func checkResults(body []byte) {
	d := newDecoder(body)
	for _, op := range sampleOps() {
		op.Buf = make([]byte, len(op.Buf))
		if decodeOpResult(&d, &op) != nil {
			return
		}
	}
	_ = d.Done(trailing)
}

func TestOpsRoundTrip(t *testing.T) {
	ops := sampleOps()
	var body []byte
	for i := range ops {
		body = appendOp(body, &ops[i])
	}
	d := newDecoder(body)
	for i := range ops {
		var w wireOp
		decodeOp(&d, &w)
		if d.Err != nil {
			t.Fatal(d.Err)
		}
		want := ops[i]
		if want.Verb == rdma.VerbRead {
			if w.readLen != len(want.Buf) {
				t.Fatalf("read length %d, want %d", w.readLen, len(want.Buf))
			}
			want.Buf = nil
		}
		if !reflect.DeepEqual(w.Op, want) {
			t.Fatalf("op %d: got %+v, want %+v", i, w.Op, want)
		}
	}
	if err := d.Done(trailing); err != nil {
		t.Fatal(err)
	}
	// Replies: every result and a per-op error decode to what was sent.
	var rep []byte
	for i := range ops {
		op := ops[i]
		op.Old = rdma.U128{Lo: uint64(i), Hi: uint64(i) * 3}
		if i == 2 {
			op.Err = errors.Join(rdma.ErrUnreachable, rdma.ErrFenced)
		}
		rep = appendOpResult(rep, &op, 1024)
	}
	d = newDecoder(rep)
	for i := range ops {
		op := ops[i]
		op.Buf = make([]byte, len(op.Buf))
		if err := decodeOpResult(&d, &op); err != nil {
			t.Fatal(err)
		}
		switch {
		case i == 2:
			if !errors.Is(op.Err, rdma.ErrUnreachable) || !errors.Is(op.Err, rdma.ErrFenced) || errors.Is(op.Err, rdma.ErrClosed) {
				t.Fatalf("error lost its sentinels: %v", op.Err)
			}
		case op.Err != nil:
			t.Fatalf("op %d: %v", i, op.Err)
		case op.Verb == rdma.VerbRead || op.Verb == rdma.VerbWrite:
		case op.Wide && op.Old != (rdma.U128{Lo: uint64(i), Hi: uint64(i) * 3}):
			t.Fatalf("op %d old %v", i, op.Old)
		case !op.Wide && op.Old != (rdma.U128{Lo: uint64(i)}):
			t.Fatalf("op %d old %v", i, op.Old)
		}
	}
	if err := d.Done(trailing); err != nil {
		t.Fatal(err)
	}
}

// Control-body kinds for FuzzControl: the first input byte picks one.
const (
	ctlJoinRequest = iota
	ctlJoinReply
	ctlPeers
	ctlRecoverRequest
	ctlRecoverReply
	ctlSend
	ctlSendAck
	ctlRangeRequest
	ctlRangeReply
	ctlKinds
)

func sampleJoinReply() rdma.JoinReply {
	return rdma.JoinReply{
		Node: 3,
		Layout: rdma.Layout{
			Generation:        9,
			Regions:           []rdma.RegionInfo{{ID: 1, Name: "locks", Size: 1 << 20}, {ID: 2, Name: "eras", Size: 512}},
			LockEntries:       1 << 16,
			EraCount:          64,
			HeartbeatInterval: 100 * time.Millisecond,
			DeadAfter:         time.Second,
			MaxLease:          30 * time.Second,
			Persistent:        true,
		},
		Peers: []rdma.Peer{{Node: 1, Addr: "10.0.0.1:7400"}, {Node: 3, Addr: "10.0.0.3:7400"}},
	}
}

// reencode decodes body and encodes the result again; ok is false if body
// does not decode.
func reencode[T any](body []byte, decode func([]byte) (T, error), encode func([]byte, T) []byte) (again []byte, ok bool) {
	v, err := decode(body)
	if err != nil {
		return nil, false
	}
	return encode(nil, v), true
}

// FuzzControl decodes arbitrary bytes as each control-path body. Nothing may
// panic, and whatever decodes must encode back to the same bytes.
func FuzzControl(f *testing.F) {
	add := func(kind byte, body []byte) { f.Add(append([]byte{kind}, body...)) }
	add(ctlJoinRequest, appendJoinRequest(nil, rdma.JoinRequest{Name: "proxy-1", Addr: "127.0.0.1:7400"}))
	add(ctlJoinReply, appendJoinReply(nil, sampleJoinReply()))
	add(ctlPeers, appendPeers(nil, sampleJoinReply().Peers))
	add(ctlPeers, binary.LittleEndian.AppendUint32(nil, 1<<31)) // a lying count
	add(ctlRecoverRequest, appendRecoverRequest(nil, rdma.RecoverRequest{Entry: 5, Era: 2, Suspect: 7}))
	add(ctlRecoverReply, appendRecoverReply(nil, rdma.RecoverReply{Status: rdma.RecoverRefused, Era: 2, RetryAfter: time.Second, Reason: "node 4 holds the entry"}))
	add(ctlSend, appendSend(nil, 1, 2, 0x10203, &rdma.Payload{1, 2, 3}))
	add(ctlSendAck, appendSendAck(nil, true, rdma.ErrNotReady))
	add(ctlRangeRequest, appendRangeRequest(nil, rdma.RangeRequest{Op: rdma.RangeBind, Name: [32]byte{1, 2, 3}, Tree: 7}))
	add(ctlRangeReply, appendRangeReply(nil, rdma.RangeReply{Status: rdma.RangeFull, Tree: 3, RetryAfter: time.Second, Reason: "all 64 range trees"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		kind, body := data[0]%ctlKinds, data[1:]
		var again []byte
		ok := true
		switch kind {
		case ctlJoinRequest:
			again, ok = reencode(body, decodeJoinRequest, appendJoinRequest)
		case ctlJoinReply:
			again, ok = reencode(body, decodeJoinReply, appendJoinReply)
		case ctlPeers:
			again, ok = reencode(body, decodePeers, appendPeers)
		case ctlRecoverRequest:
			again, ok = reencode(body, decodeRecoverRequest, appendRecoverRequest)
		case ctlRecoverReply:
			again, ok = reencode(body, decodeRecoverReply, appendRecoverReply)
		case ctlSend:
			from, to, m, err := decodeSend(body)
			if err != nil {
				return
			}
			if m.From != from {
				t.Fatalf("message from %d, frame from %d", m.From, from)
			}
			again = appendSend(nil, from, to, m.To, &m.Payload)
		case ctlRangeRequest:
			again, ok = reencode(body, decodeRangeRequest, appendRangeRequest)
		case ctlRangeReply:
			again, ok = reencode(body, decodeRangeReply, appendRangeReply)
		case ctlSendAck:
			// Error texts are not canonical (an empty one is rebuilt from
			// the sentinels), so only decoding is checked.
			_, _, _ = decodeSendAck(body)
			return
		}
		if !ok {
			return
		}
		if !bytes.Equal(again, body) {
			t.Fatalf("kind %d does not round-trip:\n in %x\nout %x", kind, body, again)
		}
	})
}

func TestControlRoundTrip(t *testing.T) {
	want := sampleJoinReply()
	got, err := decodeJoinReply(appendJoinReply(nil, want))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("join reply: %v\n got %+v\nwant %+v", err, got, want)
	}
	rr := rdma.RecoverReply{Status: rdma.RecoverDone, Era: 4, RetryAfter: 3 * time.Millisecond, Reason: "x"}
	if got, err := decodeRecoverReply(appendRecoverReply(nil, rr)); err != nil || got != rr {
		t.Fatalf("recover reply: %v %+v", err, got)
	}
	rq := rdma.RangeRequest{Op: rdma.RangeRepair, Name: [32]byte{9, 8, 7}, Tree: 1 << 40}
	if got, err := decodeRangeRequest(appendRangeRequest(nil, rq)); err != nil || got != rq {
		t.Fatalf("range request: %v %+v", err, got)
	}
	rp := rdma.RangeReply{Status: rdma.RangeBusy, Tree: 2, RetryAfter: time.Millisecond, Reason: "repairing"}
	if got, err := decodeRangeReply(appendRangeReply(nil, rp)); err != nil || got != rp {
		t.Fatalf("range reply: %v %+v", err, got)
	}
	if _, err := decodeRangeReply(appendRangeReply(nil, rdma.RangeReply{Status: 9})); err == nil {
		t.Fatal("range status 9 accepted")
	}
	for _, st := range []rdma.RecoverStatus{0, rdma.RecoverNotYet + 1} {
		if _, err := decodeRecoverReply(appendRecoverReply(nil, rdma.RecoverReply{Status: st})); !errors.Is(err, rdma.ErrBadRequest) {
			t.Fatalf("recover status %d: %v", st, err)
		}
	}
	delivered, sendErr, err := decodeSendAck(appendSendAck(nil, true, rdma.ErrNotReady))
	if err != nil || !delivered || !errors.Is(sendErr, rdma.ErrNotReady) {
		t.Fatalf("send ack: %v %v %v", delivered, sendErr, err)
	}
	if _, err := decodePeers(binary.LittleEndian.AppendUint32(nil, 1<<31)); !errors.Is(err, rdma.ErrBadRequest) {
		t.Fatalf("lying peer count: %v", err)
	}
	if _, _, _, err := decodeSend(appendSend(nil, 1, 2, rdma.MaxTarget+1, &rdma.Payload{})); err == nil {
		t.Fatal("target beyond 24 bits accepted")
	}
}
