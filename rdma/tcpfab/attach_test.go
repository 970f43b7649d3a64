package tcpfab

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// attachLog records what the server's attach handler saw and tore down.
type attachLog struct {
	mu       sync.Mutex
	attached []rdma.NodeID
	from     []string
	detached []rdma.NodeID
}

func (l *attachLog) fn(ctx context.Context, node rdma.NodeID, from string, req []byte) ([]byte, func(), error) {
	if string(req) == "refuse" {
		return nil, nil, rdma.ErrBadRequest
	}
	l.mu.Lock()
	l.attached = append(l.attached, node)
	l.from = append(l.from, from)
	l.mu.Unlock()
	return append([]byte("ok:"), req...), func() {
		l.mu.Lock()
		l.detached = append(l.detached, node)
		l.mu.Unlock()
	}, nil
}

func (l *attachLog) detachedNodes() []rdma.NodeID {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]rdma.NodeID(nil), l.detached...)
}

// TestAttach: an ATTACH request reaches the server's handler with the
// member's NodeID and source host, its reply comes back, a refusal comes
// back as the handler's error, and every set-up is torn down once, when the
// member leaves.
func TestAttach(t *testing.T) {
	ts := startServer(t, memnode.Config{Entries: 16})
	var l attachLog
	ts.srv.OnAttach(l.fn)
	ep := dial(t, ts.addr, "a")
	ctx := testCtx(t)
	for _, req := range []string{"qp1", "qp2"} {
		rep, err := ep.Attach(ctx, []byte(req))
		if err != nil || string(rep) != "ok:"+req {
			t.Fatalf("attach %q: %q %v", req, rep, err)
		}
	}
	if _, err := ep.Attach(ctx, []byte("refuse")); !errors.Is(err, rdma.ErrBadRequest) {
		t.Fatalf("refused attach: %v, want ErrBadRequest", err)
	}
	l.mu.Lock()
	if len(l.attached) != 2 || l.attached[0] != ep.Node() || l.from[0] != "127.0.0.1" {
		t.Fatalf("handler saw %v from %v", l.attached, l.from)
	}
	l.mu.Unlock()
	if d := l.detachedNodes(); len(d) != 0 {
		t.Fatalf("detached %v while the member is connected", d)
	}
	ep.Close()
	if d := l.detachedNodes(); len(d) != 2 || d[0] != ep.Node() || d[1] != ep.Node() {
		t.Fatalf("after leaving, detached %v, want both set-ups of node %d", d, ep.Node())
	}
}

// TestAttachDetachesWhenTheConnectionEnds: a member that vanishes without
// leaving (its connection just ends) has its set-ups torn down too, and its
// control connection reports itself broken to the fabric above.
func TestAttachDetachesWhenTheConnectionEnds(t *testing.T) {
	ts := startServer(t, memnode.Config{Entries: 16})
	var l attachLog
	ts.srv.OnAttach(l.fn)
	ep := dial(t, ts.addr, "a")
	if _, err := ep.Attach(testCtx(t), []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ep.Broken():
		t.Fatal("control connection broken while healthy")
	default:
	}
	ts.srv.Close() // the memory node drops every connection
	select {
	case <-ep.Broken():
	case <-time.After(10 * time.Second):
		t.Fatal("Broken not closed after the memory node dropped the connection")
	}
	for end := time.Now().Add(10 * time.Second); len(l.detachedNodes()) != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("detached %v, want node %d once", l.detachedNodes(), ep.Node())
		}
	}
}

// TestAttachRefused: without a handler an ATTACH is a bad request, and
// before JOIN it is refused like every other frame; the connection goes on.
func TestAttachRefused(t *testing.T) {
	ts := startServer(t, memnode.Config{Entries: 16})
	ep := dial(t, ts.addr, "a")
	if _, err := ep.Attach(testCtx(t), []byte("x")); !errors.Is(err, rdma.ErrBadRequest) {
		t.Fatalf("attach with no handler: %v, want ErrBadRequest", err)
	}
	mustFAA(t, ep, 1, 0)

	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := newRPCConn(c, "memory node", nil)
	rc.start()
	call := getCall(tAttach)
	call.req = []byte("early")
	if err := rc.do(testCtx(t), call, time.Second); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(call.err, rdma.ErrBadRequest) {
		t.Fatalf("attach before join: %v, want ErrBadRequest", call.err)
	}
}
