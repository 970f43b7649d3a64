package tcpfab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/shiftlock/shiftlock-proxy/memnode"
	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// rawJoinFrom joins the memory node at addr over a connection from local,
// another loopback address than the tests' 127.0.0.1 (all of 127/8 is
// loopback on Linux): another host, as the memory node sees it.
func rawJoinFrom(t *testing.T, addr, local string) (rdma.JoinReply, error) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := &rawConn{t: t, c: c, fr: newFrameReader(c)}
	r.send(frame(tJoin, 0, 1, appendJoinRequest(nil, rdma.JoinRequest{Name: "from " + local})))
	h, body := r.recv()
	switch h.Type {
	case tJoinReply:
		return decodeJoinReply(body)
	case tError:
		d := newDecoder(body)
		return rdma.JoinReply{}, decodeError(&d)
	}
	t.Fatalf("join answered with frame type %#x", h.Type)
	return rdma.JoinReply{}, nil
}

// TestJoinFloodLeavesRoomForOtherHosts: a member that joins over and over
// from one host, leaving half of its memberships at once (their IDs stay
// out of circulation while they may still be in lock entries) and keeping
// the others, cannot use up the node IDs: a proxy on another host still
// joins.
func TestJoinFloodLeavesRoomForOtherHosts(t *testing.T) {
	const ids = 100
	ts := startServer(t, memnode.Config{Entries: 64, MaxNodes: ids})
	joined, refused := 0, 0
	for i := 0; i < ids; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ep, err := Dial(ctx, ts.addr, Config{Name: fmt.Sprintf("flood-%d", i)})
		cancel()
		if err != nil {
			if !errors.Is(err, rdma.ErrUnavailable) {
				t.Fatalf("join %d refused with %v, want ErrUnavailable (a proxy retries those)", i, err)
			}
			if refused++; refused == 1 && !strings.Contains(err.Error(), "max_nodes_per_host") {
				t.Errorf("a join refused without naming the setting: %v", err)
			}
			continue
		}
		joined++
		if i%2 == 0 {
			_ = ep.Close()
		} else {
			t.Cleanup(func() { ep.Close() })
		}
	}
	rep, err := rawJoinFrom(t, ts.addr, "127.0.0.2")
	if err != nil {
		t.Fatalf("after %d of %d joins from 127.0.0.1 succeeded, a member on another host cannot join: %v", joined, ids, err)
	}
	if rep.Node == 0 {
		t.Fatalf("joined as node 0: %+v", rep)
	}
}
