package tcpfab

import (
	"context"
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

var testSecret = []byte("correct horse battery staple")

// everyFrame is one well-formed frame of every type a dialer can send, for
// unauthenticated connections to try.
func everyFrame(to rdma.NodeID) map[string][]byte {
	faa := rdma.Op{Verb: rdma.VerbFAA, Addr: rdma.Addr{Region: rdma.RegionLocks}, Value: rdma.U64(1)}
	w := rdma.Op{Verb: rdma.VerbWrite, Addr: rdma.Addr{Region: rdma.RegionLocks}, Buf: make([]byte, 16)}
	return map[string][]byte{
		"join":        frame(tJoin, 0, 1, appendJoinRequest(nil, rdma.JoinRequest{Name: "intruder"})),
		"leave":       frame(tLeave, 0, 2, nil),
		"peers":       frame(tPeers, 0, 3, nil),
		"recover":     frame(tRecover, 0, 4, nil),
		"verb":        frame(tVerb, 1, 5, appendOp(nil, &faa)),
		"batch":       frame(tBatch, 2, 6, appendOp(appendOp(nil, &faa), &w)),
		"probe reply": frame(tProbeReply, 0, 7, nil),
		"range":       frame(tRange, 0, 9, appendRangeRequest(nil, rdma.RangeRequest{Op: rdma.RangeBind})),
		"attach":      frame(tAttach, 0, 10, []byte{1}),
		"send":        frame(tSend, 0, 8, appendSend(nil, 1, to, 1, &rdma.Payload{1})),
	}
}

// expectEveryFrameRefused sends each of everyFrame(to) on a connection of
// its own to addr, without the challenge, and expects it refused.
func expectEveryFrameRefused(t *testing.T, addr string, to rdma.NodeID) {
	t.Helper()
	for name, f := range everyFrame(to) {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(f); err != nil {
				t.Fatal(err)
			}
			expectRefused(t, c)
		})
	}
}

// expectRefused checks that a connection that skipped the challenge got
// nothing but the challenge and was closed.
func expectRefused(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(2 * authTimeout))
	got, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("reading what the acceptor sent: %v", err)
	}
	if len(got) != len(authPreamble)+authNonce || string(got[:len(authPreamble)]) != authPreamble {
		t.Fatalf("an unauthenticated connection got %d bytes %q, want only the %d-byte challenge", len(got), got, len(authPreamble)+authNonce)
	}
}

// TestMemnodeRequiresSecret: with a secret, the memory node serves nodes
// that know it, refuses a wrong one and a dialer without one, and executes
// no frame of any type from an unauthenticated connection: each is closed
// with a logged reason, and the lock table is untouched.
func TestMemnodeRequiresSecret(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	host := memnode.New(memnode.Config{Entries: 64, DeadAfter: time.Minute})
	t.Cleanup(host.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(host, zap.New(core))
	srv.RequireSecret(testSecret)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()

	good := dialCfg(t, addr, Config{Name: "good", Secret: testSecret})
	mustFAA(t, good, 0, 0)

	ctx, cancel := context.WithTimeout(context.Background(), 3*authTimeout)
	defer cancel()
	if _, err := Dial(ctx, addr, Config{Name: "wrong", Secret: []byte("wrong")}); !errors.Is(err, errAuth) {
		t.Fatalf("Dial with a wrong secret: %v; want an authentication error", err)
	}
	if _, err := Dial(ctx, addr, Config{Name: "none"}); err == nil {
		t.Fatal("Dial without a secret joined a memory node that requires one")
	}

	before := host.Counters().Snapshot()
	expectEveryFrameRefused(t, addr, good.Node())
	if d := host.Counters().Snapshot().Sub(before); d.InAtomics() != 0 || d.In[rdma.VerbWrite] != 0 || d.In[rdma.VerbBatch] != 0 {
		t.Fatalf("unauthenticated frames reached the lock table: %v", d.In)
	}
	mustFAA(t, good, 0, 1) // untouched by the intruders' FAA and write
	if n := len(host.Members()); n != 1 {
		t.Fatalf("%d members after the intruders, want 1", n)
	}
	// Two failed dials and one connection per frame type: all counted,
	// the first logged (the rest are sampled, TestRefusalFloodIsSampled).
	if n, want := srv.Refused(), uint64(2+len(everyFrame(0))); n != want {
		t.Fatalf("%d refusals counted, want %d", n, want)
	}
	refused := logs.FilterMessage("tcpfab: closing unauthenticated connection").All()
	if len(refused) == 0 {
		t.Fatalf("no refusal logged: %v", logs.All())
	}
	for _, e := range refused {
		if reason, _ := e.ContextMap()["error"].(string); !strings.Contains(reason, "fabric authentication failed") {
			t.Fatalf("refusal logged without its reason: %v", e.ContextMap())
		}
	}
}

// TestPeerPortRequiresSecret: nodes that share the secret hand each other
// messages; an unauthenticated connection to a node's peer port delivers
// nothing, whatever it sends.
func TestPeerPortRequiresSecret(t *testing.T) {
	ts := startServer(t, memnode.Config{Entries: 64})
	ts.srv.RequireSecret(testSecret) // connections from now on
	a := dialCfg(t, ts.addr, Config{Name: "a", Secret: testSecret})
	b := dialCfg(t, ts.addr, Config{Name: "b", Secret: testSecret})
	got := make(chan rdma.Message, 16)
	b.Bind(func(m rdma.Message) error { got <- m; return nil })
	if err := a.Send(testCtx(t), b.Node(), 1, rdma.Payload{7}); err != nil {
		t.Fatalf("Send between nodes that share the secret: %v", err)
	}
	if m := <-got; m.Payload[0] != 7 {
		t.Fatalf("got %+v", m)
	}
	expectEveryFrameRefused(t, b.PeerAddr(), b.Node())
	select {
	case m := <-got:
		t.Fatalf("an unauthenticated connection delivered %+v", m)
	default:
	}
}

// FuzzAcceptAuth: whatever a dialer sends, the acceptor's challenge never
// panics and never succeeds without the secret.
func FuzzAcceptAuth(f *testing.F) {
	f.Add([]byte(authPreamble))
	f.Add(append([]byte(authPreamble), make([]byte, authNonce+authMACSize)...))
	f.Add(frame(tJoin, 0, 1, nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		a, d := net.Pipe()
		defer a.Close()
		go func() {
			// The dialer hangs up after its bytes, so that a short answer
			// fails at once rather than at the challenge's timeout.
			defer d.Close()
			_, _ = io.CopyN(io.Discard, d, int64(len(authPreamble)+authNonce))
			_, _ = d.Write(in)
		}()
		if err := acceptAuth(a, testSecret); err == nil {
			t.Fatalf("the challenge passed with %q", in)
		}
	})
}

// FuzzDialAuth: whatever an acceptor sends, the dialer's side never panics
// and never succeeds without the secret.
func FuzzDialAuth(f *testing.F) {
	f.Add(append([]byte(authPreamble), make([]byte, authNonce+authMACSize)...))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, d := net.Pipe()
		defer d.Close()
		// A pipe's write returns once read: drain the dialer's answer
		// while the acceptor's bytes go out, and hang up after them.
		go func() { _, _ = io.Copy(io.Discard, a) }()
		go func() {
			defer a.Close()
			_, _ = a.Write(in)
		}()
		if err := dialAuth(d, testSecret); err == nil {
			t.Fatalf("the dialer accepted %q", in)
		}
	})
}
