package tcpfab

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// rawConn is a hand-driven client for feeding a server bad input.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	fr *frameReader
}

func rawDial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, fr: newFrameReader(c)}
}

func (r *rawConn) send(p []byte) {
	r.t.Helper()
	if _, err := r.c.Write(p); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) recv() (header, []byte) {
	r.t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	h, body, err := r.fr.next()
	if err != nil {
		r.t.Fatalf("reading a reply: %v", err)
	}
	return h, append([]byte(nil), body...)
}

// expectError reads a reply and checks it is an ERROR for id matching want.
func (r *rawConn) expectError(id uint32, want error) {
	r.t.Helper()
	h, body := r.recv()
	if h.Type != tError || h.ID != id {
		r.t.Fatalf("got frame type %#x id %d, want an error for %d", h.Type, h.ID, id)
	}
	d := newDecoder(body)
	if err := decodeError(&d); !errors.Is(err, want) {
		r.t.Fatalf("error %v, want %v", err, want)
	}
}

// expectClosed checks the server hung up.
func (r *rawConn) expectClosed() {
	r.t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(r.c); err != nil {
		r.t.Fatalf("connection was not closed cleanly: %v", err)
	}
}

func (r *rawConn) join() rdma.JoinReply {
	r.t.Helper()
	r.send(frame(tJoin, 0, 1, appendJoinRequest(nil, rdma.JoinRequest{Name: "raw"})))
	h, body := r.recv()
	if h.Type != tJoinReply {
		r.t.Fatalf("join answered with type %#x", h.Type)
	}
	rep, err := decodeJoinReply(body)
	if err != nil {
		r.t.Fatal(err)
	}
	return rep
}

func verbFrame(id uint32, op rdma.Op) []byte {
	return frame(tVerb, 1, id, appendOp(nil, &op))
}

// waitLog waits for the server to log a closed connection with reason.
func waitLog(t *testing.T, ts *testServer, reason string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, e := range ts.logs.FilterMessage("tcpfab: closing connection").All() {
			if strings.Contains(e.ContextMap()["error"].(string), reason) {
				return
			}
		}
	}
	t.Fatalf("no log of a connection closed for %q; logged: %v", reason, ts.logs.All())
}

// TestBadInput feeds a server garbage, oversized frames, requests before
// join and malformed requests. Bad requests are answered with errors on a
// connection that stays usable; bad streams close only their connection,
// with a logged reason; a well-behaved node is served throughout.
func TestBadInput(t *testing.T) {
	ts := startServer(t, memnode.Config{Entries: 64})
	good := dial(t, ts.addr, "good")
	entry := uint64(3)
	n := uint64(0)
	check := func() {
		t.Helper()
		mustFAA(t, good, entry, n)
		n++
	}
	check()

	t.Run("verbs before join", func(t *testing.T) {
		r := rawDial(t, ts.addr)
		r.send(verbFrame(5, rdma.Op{Verb: rdma.VerbFAA, Addr: rdma.Addr{Region: rdma.RegionLocks}}))
		r.expectError(5, rdma.ErrBadRequest)
		r.send(frame(tPeers, 0, 6, nil))
		r.expectError(6, rdma.ErrBadRequest)
		// The connection survives and can still join.
		if rep := r.join(); rep.Node == 0 {
			t.Fatal("join after refused requests failed")
		}
		check()
	})

	t.Run("bad requests after join", func(t *testing.T) {
		r := rawDial(t, ts.addr)
		rep := r.join()
		end := rep.Layout.LockEntries * 16
		r.send(frame(0x42, 0, 10, []byte("what")))
		r.expectError(10, rdma.ErrBadRequest)
		r.send(frame(tJoin, 0, 11, appendJoinRequest(nil, rdma.JoinRequest{Name: "again"})))
		r.expectError(11, rdma.ErrBadRequest)
		r.send(frame(tVerb, 1, 12, []byte{byte(rdma.VerbCAS), 0, 1})) // truncated op
		r.expectError(12, rdma.ErrBadRequest)
		r.send(frame(tVerb, 2, 13, appendOp(nil, &rdma.Op{Verb: rdma.VerbFAA, Addr: rdma.Addr{Region: 1}})))
		r.expectError(13, rdma.ErrBadRequest)
		r.send(frame(tVerb, 1, 14, []byte{byte(rdma.VerbSend), 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}))
		r.expectError(14, rdma.ErrBadRequest)
		r.send(frame(tVerb, 1, 15, []byte{byte(rdma.VerbRead), flagWide, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0}))
		r.expectError(15, rdma.ErrBadRequest)
		r.send(frame(tBatch, 1, 16, append(appendOp(nil, &rdma.Op{Verb: rdma.VerbFAA, Addr: rdma.Addr{Region: 1}}), 0xEE)))
		r.expectError(16, rdma.ErrBadRequest)
		huge := binary.LittleEndian.AppendUint32(appendOp(nil, &rdma.Op{Verb: rdma.VerbRead, Addr: rdma.Addr{Region: 1}})[:12], MaxFrame)
		r.send(frame(tBatch, 2, 17, append(huge, huge...))) // replies would not fit a frame
		r.expectError(17, rdma.ErrBadRequest)
		r.send(frame(tRecover, 0, 18, []byte{1, 2, 3}))
		r.expectError(18, rdma.ErrBadRequest)
		r.send(frame(tBatch, maxBatch, 19, nil)) // a count the body cannot hold
		r.expectError(19, rdma.ErrBadRequest)

		// Per-verb errors come back as verb results.
		for i, tc := range []struct {
			op   rdma.Op
			want error
		}{
			{rdma.Op{Verb: rdma.VerbFAA, Addr: rdma.Addr{Region: rdma.RegionLocks, Offset: end}}, rdma.ErrOutOfBounds},
			{rdma.Op{Verb: rdma.VerbFAA, Addr: rdma.Addr{Region: rdma.RegionLocks, Offset: ^uint64(0) - 7}}, rdma.ErrOutOfBounds},
			{rdma.Op{Verb: rdma.VerbRead, Addr: rdma.Addr{Region: rdma.RegionLocks, Offset: end - 8}, Buf: make([]byte, 16)}, rdma.ErrOutOfBounds},
			{rdma.Op{Verb: rdma.VerbMaskedCAS, Wide: true, Addr: rdma.Addr{Region: rdma.RegionLocks, Offset: 8}}, rdma.ErrMisaligned},
			{rdma.Op{Verb: rdma.VerbWrite, Addr: rdma.Addr{Region: rdma.RegionLocks, Offset: 0}, Buf: make([]byte, 5)}, rdma.ErrMisaligned},
			{rdma.Op{Verb: rdma.VerbFAA, Addr: rdma.Addr{Region: 999}}, rdma.ErrUnknownRegion},
		} {
			id := uint32(100 + i)
			r.send(verbFrame(id, tc.op))
			h, body := r.recv()
			if h.Type != tVerbReply || h.ID != id || h.Count != 1 {
				t.Fatalf("case %d: reply type %#x id %d count %d", i, h.Type, h.ID, h.Count)
			}
			op := tc.op
			d := newDecoder(body)
			if err := decodeOpResult(&d, &op); err != nil || d.Done(trailing) != nil {
				t.Fatalf("case %d: reply does not decode: %v", i, err)
			}
			if !errors.Is(op.Err, tc.want) {
				t.Fatalf("case %d: %v, want %v", i, op.Err, tc.want)
			}
		}
		// And the connection still executes verbs.
		r.send(verbFrame(200, rdma.Op{Verb: rdma.VerbFAA, Addr: rep.Layout.EntryAddr(entry), Value: rdma.U64(1)}))
		h, body := r.recv()
		op := rdma.Op{Verb: rdma.VerbFAA}
		d := newDecoder(body)
		if h.Type != tVerbReply || decodeOpResult(&d, &op) != nil || op.Err != nil || op.Old.Lo != n {
			t.Fatalf("verb after bad requests: type %#x old %d err %v", h.Type, op.Old.Lo, op.Err)
		}
		n++
		check()
	})

	// Framing errors close the connection, with the reason logged.
	truncated := verbFrame(9, rdma.Op{Verb: rdma.VerbFAA, Addr: rdma.Addr{Region: 1}})
	for _, tc := range []struct {
		name      string
		join, eof bool // join first; hang up after sending
		send      []byte
		log       string
	}{
		{"garbage", false, false, []byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), "bad magic"},
		{"oversized frame", true, false, appendHeader(nil, header{Len: MaxFrame + 1, Type: tVerb, Count: 1, ID: 9}), "exceeds"},
		{"truncated frame", true, true, truncated[:len(truncated)-3], "unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rawDial(t, ts.addr)
			if tc.join {
				r.join()
			}
			r.send(tc.send)
			if tc.eof {
				_ = r.c.(*net.TCPConn).CloseWrite()
			}
			r.expectClosed()
			waitLog(t, ts, tc.log)
			check()
		})
	}
}

// TestPeerPortGarbage checks that junk on a node's Send port closes only
// that connection, and Sends from real nodes keep arriving.
func TestPeerPortGarbage(t *testing.T) {
	ts := startServer(t, memnode.Config{Entries: 64})
	core, logs := observer.New(zapcore.WarnLevel)
	a := dial(t, ts.addr, "a")
	b := dialCfg(t, ts.addr, Config{Name: "b", Logger: zap.New(core)})
	var ib rdma.Inbox
	tgt, ch, _ := ib.Open()
	b.Bind(ib.Deliver)
	send := func(p byte) {
		t.Helper()
		if err := a.Send(testCtx(t), b.Node(), tgt, rdma.Payload{p}); err != nil {
			t.Fatal(err)
		}
		if m := <-ch; m.Payload[0] != p || m.From != a.Node() {
			t.Fatalf("got %+v", m)
		}
	}
	send(1)
	for _, junk := range [][]byte{
		[]byte("\x00\x00\x00\x00garbage!"),
		appendHeader(nil, header{Len: MaxFrame + 1, Type: tSend}),
		frame(tVerb, 1, 1, appendOp(nil, &rdma.Op{Verb: rdma.VerbFAA})),
		frame(tSend, 0, 1, []byte{1, 2, 3}),
	} {
		r := rawDial(t, b.PeerAddr())
		r.send(junk)
		r.expectClosed()
		send(junk[5] + 2)
	}
	closed := logs.FilterMessage("tcpfab: closing peer connection").All()
	if len(closed) != 4 {
		t.Fatalf("%d peer connections logged as closed, want 4: %v", len(closed), logs.All())
	}
	// A well-formed Send addressed to another node is refused, not delivered.
	r := rawDial(t, b.PeerAddr())
	r.send(frame(tSend, 0, 1, appendSend(nil, a.Node(), b.Node()+100, tgt, &rdma.Payload{})))
	h, body := r.recv()
	delivered, sendErr, err := decodeSendAck(body)
	if h.Type != tSendAck || err != nil || delivered || !errors.Is(sendErr, rdma.ErrUnreachable) {
		t.Fatalf("misaddressed send: type %#x delivered %v err %v/%v", h.Type, delivered, sendErr, err)
	}
	select {
	case m := <-ch:
		t.Fatalf("misaddressed send was delivered: %+v", m)
	default:
	}
}

// TestSendReachesWrongNode: a node whose advertised address leads to another
// node (a reused port) is unreachable; the other node never gets the message.
func TestSendReachesWrongNode(t *testing.T) {
	ts := startServer(t, memnode.Config{Entries: 64})
	c := dial(t, ts.addr, "c")
	got := make(chan rdma.Message, 4)
	c.Bind(func(m rdma.Message) error { got <- m; return nil })
	b := dialCfg(t, ts.addr, Config{Name: "b", Advertise: c.PeerAddr()})
	a := dial(t, ts.addr, "a")
	for i := 0; i < 2; i++ {
		if err := a.Send(testCtx(t), b.Node(), 1, rdma.Payload{}); !errors.Is(err, rdma.ErrUnreachable) {
			t.Fatalf("send %d to a node behind someone else's address: %v", i, err)
		}
	}
	if err := a.Send(testCtx(t), c.Node(), 1, rdma.Payload{7}); err != nil {
		t.Fatalf("send to the node that owns the address: %v", err)
	}
	if m := <-got; m.Payload[0] != 7 || len(got) != 0 {
		t.Fatalf("c received %+v (and %d more)", m, len(got))
	}
}

// TestPeerThatDoesNotReadIsNotBuffered: a member pipelines READs of 256 KiB
// each and reads none of the replies. The server answers a few, then waits
// for the socket; it does not run ahead and queue every reply. Before, its
// reader wrote only once it had answered every request it had read: 1,024
// such requests (40 KiB) queued 256 MiB, and a peer could ask for more
// while that was written.
func TestPeerThatDoesNotReadIsNotBuffered(t *testing.T) {
	const size, n = 256 << 10, 1024
	ts := startServer(t, memnode.Config{Entries: 1 << 15}) // a 512 KiB table
	r := rawDial(t, ts.addr)
	if err := r.c.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	r.join()
	reads := func() uint64 { return ts.host.Counters().Snapshot().In[rdma.VerbRead] }
	before := reads()
	var req []byte
	for i := range n {
		req = append(req, verbFrame(uint32(10+i), rdma.Op{Verb: rdma.VerbRead, Addr: rdma.Addr{Region: rdma.RegionLocks}, Buf: make([]byte, size)})...)
	}
	r.send(req)
	// Wait until the server stops answering: its socket is full.
	last, still := reads(), 0
	for still < 20 {
		time.Sleep(10 * time.Millisecond)
		if now := reads(); now != last {
			last, still = now, 0
		} else {
			still++
		}
	}
	t.Logf("answered %d of %d before the socket filled", last-before, n)
	// The kernel's socket buffers take a few megabytes on loopback.
	if answered := last - before; answered*size > 32<<20 {
		t.Errorf("the server answered %d of %d READs (%d MiB) for a peer that reads nothing", answered, n, answered*size>>20)
	}
	for i := range n {
		h, body := r.recv()
		if h.Type != tVerbReply || h.ID != uint32(10+i) || len(body) < size {
			t.Fatalf("reply %d: type %#x id %d, %d bytes", i, h.Type, h.ID, len(body))
		}
	}
}
