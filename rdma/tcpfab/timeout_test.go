package tcpfab

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// stallingNode is a memory node that answers Join and then holds every
// request until released, as a frozen or partitioned memory node would. On
// release it answers them all, late, with FAA results of old value 42.
type stallingNode struct {
	addr    string
	release chan struct{}
	conns   chan net.Conn
}

func startStallingNode(t *testing.T) *stallingNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &stallingNode{addr: ln.Addr().String(), release: make(chan struct{}), conns: make(chan net.Conn, 8)}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		close(s.conns)
		for c := range s.conns {
			c.Close()
		}
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns <- c
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.serve(c)
			}()
		}
	}()
	return s
}

func (s *stallingNode) serve(c net.Conn) {
	fr := newFrameReader(c)
	var held []header
	released := false
	answer := func(h header) {
		op := rdma.Op{Verb: rdma.VerbFAA, Old: rdma.U64(42)}
		b, at := beginFrame(nil, tVerbReply, 1, h.ID)
		_, _ = c.Write(endFrame(appendOpResult(b, &op, 0), at))
	}
	frames := make(chan header)
	go func() {
		defer close(frames)
		for {
			h, body, err := fr.next()
			if err != nil {
				return
			}
			if h.Type == tJoin {
				rep := sampleJoinReply()
				rep.Layout.Regions = []rdma.RegionInfo{{ID: rdma.RegionLocks, Name: "locks", Size: 1 << 10}}
				b, at := beginFrame(nil, tJoinReply, 0, h.ID)
				_, _ = c.Write(endFrame(appendJoinReply(b, rep), at))
				continue
			}
			_ = body
			frames <- h
		}
	}()
	for {
		select {
		case h, ok := <-frames:
			if !ok {
				return
			}
			if released {
				answer(h)
			} else {
				held = append(held, h)
			}
		case <-s.release:
			if !released {
				released = true
				for _, h := range held {
					answer(h)
				}
			}
		}
	}
}

// TestStalledMemoryNode: verbs to a memory node that stops answering end
// with the default timeout (ErrUnreachable) or the caller's context, whether
// the caller was reading for everyone or waiting on someone else's read.
// Late replies to abandoned verbs are ignored once the node answers again.
func TestStalledMemoryNode(t *testing.T) {
	s := startStallingNode(t)
	ep := dialCfg(t, s.addr, Config{Name: "a", Timeout: 150 * time.Millisecond})
	addr := ep.Layout().EntryAddr(1)

	run := func(n int, ctxf func() (context.Context, context.CancelFunc)) []error {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for g := 0; g < n; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := ctxf()
				defer cancel()
				_, errs[g] = ep.FAA(ctx, addr, 1)
			}()
		}
		wg.Wait()
		return errs
	}
	for i, err := range run(8, func() (context.Context, context.CancelFunc) {
		return context.WithCancel(context.Background())
	}) {
		if !errors.Is(err, rdma.ErrUnreachable) {
			t.Fatalf("verb %d on a stalled memory node: %v, want a timeout wrapping ErrUnreachable", i, err)
		}
	}
	for i, err := range run(8, func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 30*time.Millisecond)
	}) {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("verb %d with a 30ms deadline: %v", i, err)
		}
	}
	// A cancelled verb ends with the cancellation. Its own endpoint has a
	// long default timeout, so that a host stalled past 150 ms between the
	// post and the cancel cannot turn it into a timeout instead.
	patient := dialCfg(t, s.addr, Config{Name: "b", Timeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := patient.FAA(ctx, addr, 1)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled verb: %v", err)
	}

	// The node wakes up and answers everything, late. The stale replies
	// are skipped and new verbs get their own answers.
	close(s.release)
	for i := 0; i < 20; i++ {
		old, err := ep.FAA(testCtx(t), addr, 1)
		if err != nil || old != 42 {
			t.Fatalf("verb after the node recovered: %d %v", old, err)
		}
	}
}

// TestDialStalled: a Join that is never answered ends with the timeout.
func TestDialStalled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			buf := make([]byte, 1024)
			for {
				if _, err := c.Read(buf); err != nil {
					return
				}
			}
		}
	}()
	_, err = Dial(context.Background(), ln.Addr().String(), Config{Timeout: 100 * time.Millisecond})
	if !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("dial of a silent memory node: %v", err)
	}
}

// TestSendToStalledPeer: a Send whose receiver never acks ends with the
// default timeout, also once the memory node is gone (Sends do not need
// it, and neither does their timeout).
func TestSendToStalledPeer(t *testing.T) {
	ts := startServer(t, memnode.Config{Entries: 64})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	b := dialCfg(t, ts.addr, Config{Name: "b", Advertise: ln.Addr().String()})
	a := dialCfg(t, ts.addr, Config{Name: "a", Timeout: 150 * time.Millisecond})
	if _, err := a.Control().Peers(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(context.Background(), b.Node(), 1, rdma.Payload{}); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("send to a peer that never acks: %v", err)
	}
	ts.srv.Close()
	if err := a.Send(context.Background(), b.Node(), 1, rdma.Payload{}); !errors.Is(err, rdma.ErrUnreachable) {
		t.Fatalf("send to a stalled peer without a memory node: %v", err)
	}
}
