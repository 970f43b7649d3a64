package verbs

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

func randomOp(r *rand.Rand) rdma.Op {
	verbs := []rdma.Verb{rdma.VerbRead, rdma.VerbWrite, rdma.VerbCAS, rdma.VerbFAA, rdma.VerbMaskedCAS, rdma.VerbMaskedFAA}
	op := rdma.Op{Verb: verbs[r.IntN(len(verbs))], Addr: rdma.Addr{Region: rdma.RegionID(r.IntN(5)), Offset: r.Uint64N(1 << 20)}}
	u := func() rdma.U128 { return rdma.U128{Lo: r.Uint64(), Hi: r.Uint64()} }
	switch op.Verb {
	case rdma.VerbRead, rdma.VerbWrite:
		op.Buf = make([]byte, 8*r.IntN(5))
		for i := range op.Buf {
			op.Buf[i] = byte(r.Uint32())
		}
	default:
		op.Wide = r.IntN(2) == 0
		op.Compare, op.CompareMask, op.Value, op.Mask = u(), u(), u(), u()
		if !op.Wide {
			op.Compare.Hi, op.CompareMask.Hi, op.Value.Hi, op.Mask.Hi = 0, 0, 0, 0
		}
		if op.Verb == rdma.VerbFAA || op.Verb == rdma.VerbMaskedFAA {
			op.Compare, op.CompareMask = rdma.U128{}, rdma.U128{}
		}
	}
	return op
}

// TestRequestRoundTrip: every verb of a CPU request arrives as sent:
// verb, width, address, operands, a Write's data and a Read's length.
func TestRequestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var req Request
	var lens []int
	for n := 0; n < 200; n++ {
		ops := make([]rdma.Op, r.IntN(20))
		for i := range ops {
			ops[i] = randomOp(r)
		}
		msg := appendRequest(nil, uint32(n), ops)
		if err := DecodeRequest(msg, &req, &lens); err != nil {
			t.Fatalf("request %d: %v", n, err)
		}
		if req.ID != uint32(n) || len(req.Ops) != len(ops) {
			t.Fatalf("request %d: id %d, %d ops; sent %d", n, req.ID, len(req.Ops), len(ops))
		}
		for i := range ops {
			got, want := req.Ops[i], ops[i]
			if want.Verb == rdma.VerbRead {
				if lens[i] != len(want.Buf) {
					t.Fatalf("read length %d, sent %d", lens[i], len(want.Buf))
				}
				want.Buf = nil
			}
			if want.Verb == rdma.VerbWrite && len(want.Buf) == 0 {
				want.Buf = got.Buf // empty either way
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("request %d op %d:\n got %+v\nwant %+v", n, i, got, want)
			}
		}
		if len(msg) > replyReserve(ops)+10000 {
			t.Fatal("unreachable")
		}
	}
}

// TestReplyRoundTrip: results, errors included, come back into the
// request's ops; the errors still match their sentinels.
func TestReplyRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	ops := make([]rdma.Op, 40)
	for i := range ops {
		ops[i] = randomOp(r)
	}
	sent := make([]rdma.Op, len(ops))
	out := appendReplyHeader(nil, 77, len(ops))
	for i := range ops {
		sent[i] = ops[i]
		op := &sent[i]
		switch {
		case i%7 == 3:
			op.Err = errors.Join(rdma.ErrMisaligned, errors.New("offset 3"))
		case op.Verb == rdma.VerbRead:
			op.Buf = bytes.Repeat([]byte{byte(i)}, len(op.Buf))
		default:
			op.Old = rdma.U128{Lo: uint64(i) * 3, Hi: uint64(i) * 5}
			if !op.Wide {
				op.Old.Hi = 0
			}
		}
		out = appendResult(out, op)
	}
	if id, err := replyID(out); err != nil || id != 77 {
		t.Fatalf("reply id %d %v", id, err)
	}
	if len(out) > replyReserve(ops) {
		t.Fatalf("reply of %d bytes exceeds its reserve %d", len(out), replyReserve(ops))
	}
	for i := range ops {
		if ops[i].Verb == rdma.VerbRead {
			ops[i].Buf = make([]byte, len(ops[i].Buf))
		}
	}
	reqErr, err := decodeReply(out, ops)
	if err != nil || reqErr != nil {
		t.Fatal(reqErr, err)
	}
	for i := range ops {
		got, want := &ops[i], &sent[i]
		switch {
		case want.Err != nil:
			if !errors.Is(got.Err, rdma.ErrMisaligned) || errors.Is(got.Err, rdma.ErrOutOfBounds) || got.Err.Error() != want.Err.Error() {
				t.Fatalf("op %d error %v, sent %v", i, got.Err, want.Err)
			}
		case want.Verb == rdma.VerbRead:
			if !bytes.Equal(got.Buf, want.Buf) {
				t.Fatalf("op %d read %x, sent %x", i, got.Buf, want.Buf)
			}
		case want.Verb != rdma.VerbWrite:
			if got.Old != want.Old {
				t.Fatalf("op %d old %v, sent %v", i, got.Old, want.Old)
			}
		}
	}
	// A request failed as a whole.
	fenced := appendRequestError(nil, 9, errors.Join(rdma.ErrUnreachable, rdma.ErrFenced))
	reqErr, err = decodeReply(fenced, ops)
	if err != nil || !errors.Is(reqErr, rdma.ErrFenced) || !errors.Is(reqErr, rdma.ErrUnreachable) {
		t.Fatalf("request error: %v %v", reqErr, err)
	}
	// A reply that does not answer the request is a decoding error.
	if _, err := decodeReply(out, ops[:3]); err == nil {
		t.Fatal("a reply with too many results decoded")
	}
}

func TestAttachRoundTrip(t *testing.T) {
	req := AttachRequest{QP: QPInfo{QPN: 0x123456, PSN: 0xabcdef, GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 77, 15: 1}}}
	got, err := DecodeAttachRequest(req.Encode(nil))
	if err != nil || got != req {
		t.Fatalf("attach request: %+v %v", got, err)
	}
	rep := AttachReply{QP: req.QP, Credits: 32, Mode: LockTableCPU, Device: "rxe0 (rxe0)",
		Regions: Plan(LockTableCPU, []rdma.RegionInfo{{ID: rdma.RegionLocks, Size: 64}, {ID: rdma.RegionNodes, Size: 96}})}
	rep.Regions[1].Addr, rep.Regions[1].RKey = 0x7f0000001000, 0x1234
	back, err := DecodeAttachReply(rep.Encode(nil))
	if err != nil || !reflect.DeepEqual(back, rep) {
		t.Fatalf("attach reply: %+v %v", back, err)
	}
	if _, err := DecodeAttachRequest([]byte{2}); !errors.Is(err, rdma.ErrBadRequest) {
		t.Fatalf("other version: %v", err)
	}
}

func TestPeerAndHandshakeRoundTrip(t *testing.T) {
	d := PeerData{Seq: 9, From: 3, To: 4, Target: 0x10203, Payload: rdma.Payload{1, 2, 3}}
	gd, ga, err := decodePeer(d.encode(nil))
	if err != nil || ga != nil || *gd != d {
		t.Fatalf("data: %+v %+v %v", gd, ga, err)
	}
	a := PeerAck{Seq: 9, Err: errors.Join(rdma.ErrNotReady, errors.New("target closed"))}
	gd, ga, err = decodePeer(a.encode(nil))
	if err != nil || gd != nil || ga.Seq != 9 || ga.Delivered || !errors.Is(ga.Err, rdma.ErrNotReady) {
		t.Fatalf("ack: %+v %+v %v", gd, ga, err)
	}
	if len(a.encode(nil)) > peerMsgMax || peerDataSize > peerMsgMax {
		t.Fatal("a peer message outgrows its receive buffer")
	}
	h := handshake{Kind: hsReply, ID: 0xdeadbeef, QP: QPInfo{QPN: 0x11, PSN: 0x22, GID: [16]byte{1, 2, 3}}}
	back, err := parseHandshake(h.payload())
	if err != nil || back != h {
		t.Fatalf("handshake: %+v %v", back, err)
	}
	bad := h.payload()
	bad[0] = 9
	if _, err := parseHandshake(bad); !errors.Is(err, rdma.ErrBadRequest) {
		t.Fatalf("bad handshake kind: %v", err)
	}
	bad = h.payload()
	bad[31] = 1
	if _, err := parseHandshake(bad); err == nil {
		t.Fatal("handshake with trailing garbage accepted")
	}
}

// TestPlanMechanisms pins the rule of one mechanism per region.
func TestPlanMechanisms(t *testing.T) {
	regions := []rdma.RegionInfo{{ID: rdma.RegionLocks}, {ID: rdma.RegionEras}, {ID: rdma.RegionNodes}, {ID: rdma.RegionRanges}}
	for _, tc := range []struct {
		mode  LockTableMode
		locks Mechanism
		right uint8
	}{{LockTableCPU, CPU, 0}, {LockTableOneSided, OneSided, RightRead | RightWrite | RightAtomic}} {
		want := map[rdma.RegionID]RegionMap{
			rdma.RegionLocks:  {ID: rdma.RegionLocks, Mech: tc.locks, Rights: tc.right},
			rdma.RegionEras:   {ID: rdma.RegionEras, Mech: OneSided, Rights: RightRead},
			rdma.RegionNodes:  {ID: rdma.RegionNodes, Mech: OneSided, Rights: RightRead | RightWrite},
			rdma.RegionRanges: {ID: rdma.RegionRanges, Mech: CPU},
		}
		for _, m := range Plan(tc.mode, regions) {
			if m != want[m.ID] {
				t.Errorf("mode %v region %d: %+v, want %+v", tc.mode, m.ID, m, want[m.ID])
			}
		}
	}
}

// TestCheckOpAgreesWithMemory: on a CPU region, the endpoint's own check
// fails a verb exactly when rdma.Memory would, with the same sentinel, so
// that verbs and the other fabrics return the same errors.
func TestCheckOpAgreesWithMemory(t *testing.T) {
	const size = 256
	m := &RegionMap{ID: rdma.RegionLocks, Mech: CPU, Size: size}
	mem := rdma.NewMemory(rdma.RegionLocks, "locks", size)
	r := rand.New(rand.NewPCG(7, 8))
	sentinels := []error{rdma.ErrMisaligned, rdma.ErrOutOfBounds, rdma.ErrBadRequest}
	for i := 0; i < 5000; i++ {
		op := randomOp(r)
		op.Addr.Offset = r.Uint64N(size + 48)
		if op.Verb == rdma.VerbRead || op.Verb == rdma.VerbWrite {
			op.Buf = make([]byte, r.IntN(40))
		}
		mine := checkOp(&op, m)
		theirs := mem.Exec(&op)
		for _, s := range sentinels {
			if errors.Is(mine, s) != errors.Is(theirs, s) {
				t.Fatalf("%v at %#x (%d bytes, wide %v): check says %v, memory says %v", op.Verb, op.Addr.Offset, len(op.Buf), op.Wide, mine, theirs)
			}
		}
		if (mine == nil) != (theirs == nil) {
			t.Fatalf("%v at %#x: check says %v, memory says %v", op.Verb, op.Addr.Offset, mine, theirs)
		}
	}
}

// TestCheckOpOneSidedRights: one-sided regions take only what they were
// registered for, and never a masked or 16-byte atomic.
func TestCheckOpOneSidedRights(t *testing.T) {
	ro := &RegionMap{ID: rdma.RegionEras, Mech: OneSided, Rights: RightRead, Size: 64}
	rw := &RegionMap{ID: rdma.RegionNodes, Mech: OneSided, Rights: RightRead | RightWrite, Size: 64}
	rwa := &RegionMap{ID: rdma.RegionLocks, Mech: OneSided, Rights: RightRead | RightWrite | RightAtomic, Size: 64}
	buf := make([]byte, 8)
	for _, tc := range []struct {
		m    *RegionMap
		op   rdma.Op
		want error
	}{
		{ro, rdma.Op{Verb: rdma.VerbRead, Buf: buf}, nil},
		{ro, rdma.Op{Verb: rdma.VerbWrite, Buf: buf}, rdma.ErrBadRequest},
		{rw, rdma.Op{Verb: rdma.VerbWrite, Buf: buf}, nil},
		{rw, rdma.Op{Verb: rdma.VerbFAA}, rdma.ErrBadRequest},
		{rwa, rdma.Op{Verb: rdma.VerbCAS}, nil},
		{rwa, rdma.Op{Verb: rdma.VerbFAA}, nil},
		{rwa, rdma.Op{Verb: rdma.VerbMaskedCAS}, ErrNoExtendedAtomics},
		{rwa, rdma.Op{Verb: rdma.VerbMaskedFAA}, ErrNoExtendedAtomics},
		{rwa, rdma.Op{Verb: rdma.VerbCAS, Wide: true}, ErrNoExtendedAtomics},
	} {
		err := checkOp(&tc.op, tc.m)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%v on region %d (rights %#x): %v, want %v", tc.op.Verb, tc.m.ID, tc.m.Rights, err, tc.want)
		}
	}
}

// FuzzDecodeRequest: the memory node's decoder never panics, accepts
// nothing malformed that it cannot re-encode exactly, and refuses with
// ErrBadRequest.
func FuzzDecodeRequest(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 1))
	for n := 0; n < 8; n++ {
		ops := make([]rdma.Op, n)
		for i := range ops {
			ops[i] = randomOp(r)
		}
		f.Add(appendRequest(nil, uint32(n), ops))
	}
	f.Add([]byte{msgMagic, typeRequest, 0xff, 0xff, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		var req Request
		var lens []int
		if err := DecodeRequest(p, &req, &lens); err != nil {
			if !errors.Is(err, rdma.ErrBadRequest) {
				t.Fatalf("refusal without ErrBadRequest: %v", err)
			}
			return
		}
		for i := range req.Ops {
			if req.Ops[i].Verb == rdma.VerbRead {
				req.Ops[i].Buf = make([]byte, lens[i])
			}
		}
		if back := appendRequest(nil, req.ID, req.Ops); !bytes.Equal(back, p) {
			t.Fatalf("accepted %x, which re-encodes as %x", p, back)
		}
	})
}

// FuzzDecodeReply: a member's decoder never panics on what its memory node
// (or anyone) sends, whatever the request was.
func FuzzDecodeReply(f *testing.F) {
	ops := []rdma.Op{{Verb: rdma.VerbRead, Buf: make([]byte, 16)}, {Verb: rdma.VerbMaskedCAS, Wide: true}, {Verb: rdma.VerbWrite}, {Verb: rdma.VerbFAA}}
	good := appendReplyHeader(nil, 1, len(ops))
	for i := range ops {
		good = appendResult(good, &ops[i])
	}
	f.Add(good)
	f.Add(appendRequestError(nil, 1, rdma.ErrFenced))
	f.Fuzz(func(t *testing.T, p []byte) {
		mine := make([]rdma.Op, len(ops))
		copy(mine, ops)
		mine[0].Buf = make([]byte, 16)
		_, _ = decodeReply(p, mine)
		_, _ = replyID(p)
	})
}

// FuzzDecodePeer: messages between members and handshakes never panic a
// receiver, and what decodes re-encodes exactly.
func FuzzDecodePeer(f *testing.F) {
	d := PeerData{Seq: 1, From: 2, To: 3, Target: 4}
	a := PeerAck{Seq: 1, Delivered: true}
	f.Add(d.encode(nil))
	f.Add(a.encode(nil))
	f.Add((&PeerAck{Seq: 2, Err: rdma.ErrNotReady}).encode(nil))
	f.Fuzz(func(t *testing.T, p []byte) {
		gd, ga, err := decodePeer(p)
		switch {
		case err != nil:
		case gd != nil:
			if back := gd.encode(nil); !bytes.Equal(back, p) {
				t.Fatalf("data %x re-encodes as %x", p, back)
			}
		case ga != nil && ga.Err == nil:
			if back := ga.encode(nil); !bytes.Equal(back, p) {
				t.Fatalf("ack %x re-encodes as %x", p, back)
			}
		}
		var hp rdma.Payload
		copy(hp[:], p)
		if h, err := parseHandshake(hp); err == nil && h.payload() != hp {
			t.Fatalf("handshake %x re-encodes as %x", hp, h.payload())
		}
	})
}

// FuzzDecodeAttach: set-up messages from the control connection never
// panic either side.
func FuzzDecodeAttach(f *testing.F) {
	f.Add(AttachRequest{}.Encode(nil))
	f.Add(AttachReply{Credits: 1, Regions: Plan(LockTableCPU, []rdma.RegionInfo{{ID: 1}})}.Encode(nil))
	f.Fuzz(func(t *testing.T, p []byte) {
		_, _ = DecodeAttachRequest(p)
		if r, err := DecodeAttachReply(p); err == nil && !bytes.Equal(r.Encode(nil), p) {
			t.Fatalf("reply %x re-encodes differently", p)
		}
	})
}

// TestRequestSizes: the endpoint packs verbs into CPU requests of at most
// MsgMax bytes by adding up opRequestSize, so it must be exactly what
// appendRequest writes for each verb, or a request could outgrow the memory
// node's receive buffer.
func TestRequestSizes(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 36))
	for i := 0; i < 1000; i++ {
		ops := make([]rdma.Op, 1+r.IntN(4))
		want := msgHeader
		for k := range ops {
			ops[k] = randomOp(r)
			want += opRequestSize(&ops[k])
		}
		if got := len(appendRequest(nil, 1, ops)); got != want {
			t.Fatalf("%+v: encoded in %d bytes, opRequestSize says %d", ops, got, want)
		}
	}
	if n := opRequestSize(&rdma.Op{Verb: rdma.VerbSend}); n != -1 {
		t.Fatalf("a Send, which is no memory verb, has request size %d", n)
	}
}

// TestGIDIndex: a GID index is a number or "" (the port's first IPv4
// RoCE v2 GID, -1 to the device layer); anything else is refused with a
// message that names it.
func TestGIDIndex(t *testing.T) {
	for gid, want := range map[string]int{"": -1, "0": 0, "3": 3} {
		if got, err := (DeviceConfig{GID: gid}).gidIndex(); err != nil || got != want {
			t.Fatalf("GID %q: %d %v, want %d", gid, got, err, want)
		}
	}
	for _, gid := range []string{"-1", "x", "1.5"} {
		if _, err := (DeviceConfig{GID: gid}).gidIndex(); err == nil || !strings.Contains(err.Error(), gid) {
			t.Fatalf("GID %q: %v, want an error that names it", gid, err)
		}
	}
}
