package tcpfab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// Sends go straight from node to node, the DC initiator/target analogue:
// one cached, pipelined connection per destination, found through the
// memory node's address book. They never pass through the memory node.

// peerSide is an endpoint's Send machinery: the address book, the outbound
// connections and the listener for inbound Sends.
type peerSide struct {
	e    *Endpoint
	ln   net.Listener
	self string

	mu      sync.RWMutex
	book    map[rdma.NodeID]string
	out     map[rdma.NodeID]*peer
	inbound map[net.Conn]struct{}
	closed  bool

	refresh sync.Mutex // one address-book refresh at a time
}

// peer is the cached connection to one destination.
type peer struct {
	rc   atomic.Pointer[rpcConn]
	dial sync.Mutex // one dial at a time
}

// init runs once joined; the watchdog may already be looking at ps.
func (ps *peerSide) init(e *Endpoint, ln net.Listener, self string, book []rdma.Peer) {
	ps.mu.Lock()
	ps.e, ps.ln, ps.self = e, ln, self
	ps.out = map[rdma.NodeID]*peer{}
	ps.inbound = map[net.Conn]struct{}{}
	ps.mu.Unlock()
	ps.learn(book)
}

// learn replaces the address book with the memory node's current one.
func (ps *peerSide) learn(book []rdma.Peer) {
	m := make(map[rdma.NodeID]string, len(book))
	for _, p := range book {
		m[p.Node] = p.Addr
	}
	ps.mu.Lock()
	ps.book = m
	ps.mu.Unlock()
}

// forget drops n's address after it proved unreachable, so the next Send to
// it asks the memory node again, and breaks rc, the connection that reached
// someone else, if any. The peer entry itself stays: goroutines may be
// queued on its dial lock, and close must find every connection.
func (ps *peerSide) forget(n rdma.NodeID, rc *rpcConn) {
	ps.mu.Lock()
	delete(ps.book, n)
	ps.mu.Unlock()
	if rc != nil {
		rc.fail(fmt.Errorf("%w: node %d: its address reached another node", rdma.ErrUnreachable, n))
	}
}

func (ps *peerSide) lookup(ctx context.Context, n rdma.NodeID) (string, error) {
	ps.mu.RLock()
	addr, ok := ps.book[n]
	ps.mu.RUnlock()
	if ok {
		return addr, nil
	}
	ps.refresh.Lock()
	defer ps.refresh.Unlock()
	book, err := ps.e.fetchPeers(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: node %d: address book: %w", rdma.ErrUnreachable, n, err)
	}
	ps.learn(book)
	ps.mu.RLock()
	addr, ok = ps.book[n]
	ps.mu.RUnlock()
	if !ok || addr == "" {
		return "", fmt.Errorf("%w: node %d is not a member", rdma.ErrUnreachable, n)
	}
	return addr, nil
}

// conn returns the live connection to n, dialing one if needed.
func (ps *peerSide) conn(ctx context.Context, n rdma.NodeID) (*rpcConn, error) {
	ps.mu.RLock()
	p := ps.out[n]
	closed := ps.closed
	ps.mu.RUnlock()
	if closed {
		return nil, rdma.ErrClosed
	}
	if p != nil {
		if rc := p.rc.Load(); rc != nil && !rc.isBroken() {
			return rc, nil
		}
	} else {
		ps.mu.Lock()
		if p = ps.out[n]; p == nil {
			p = &peer{}
			ps.out[n] = p
		}
		ps.mu.Unlock()
	}
	p.dial.Lock()
	defer p.dial.Unlock()
	if rc := p.rc.Load(); rc != nil && !rc.isBroken() {
		return rc, nil
	}
	addr, err := ps.lookup(ctx, n)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	if _, ok := ctx.Deadline(); !ok && ps.e.timeout > 0 {
		d.Timeout = ps.e.timeout
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		ps.forget(n, nil)
		return nil, fmt.Errorf("%w: node %d at %s: %v", rdma.ErrUnreachable, n, addr, err)
	}
	if secret := ps.e.cfg.Secret; len(secret) > 0 {
		if err := dialAuth(c, secret); err != nil {
			_ = c.Close()
			ps.forget(n, nil)
			return nil, fmt.Errorf("%w: node %d at %s: %v", rdma.ErrUnreachable, n, addr, err)
		}
	}
	rc := newRPCConn(c, fmt.Sprintf("node %d at %s", n, addr), ps.e.log)
	ps.mu.Lock()
	if ps.closed {
		ps.mu.Unlock()
		_ = c.Close()
		return nil, rdma.ErrClosed
	}
	p.rc.Store(rc)
	ps.mu.Unlock()
	rc.start()
	return rc, nil
}

// Send delivers p to target t on node to over the cached connection to it
// and waits for the receiver's ack, which carries its handler's verdict.
func (e *Endpoint) Send(ctx context.Context, to rdma.NodeID, t rdma.Target, p rdma.Payload) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	if t > rdma.MaxTarget {
		return fmt.Errorf("%w: target %#x", rdma.ErrBadRequest, t)
	}
	if to == e.node {
		delivered, err := e.deliver(to, rdma.Message{From: e.node, To: t, Payload: p})
		if delivered {
			e.ctrs.Out(rdma.VerbSend)
		}
		return err
	}
	rc, err := e.peers.conn(ctx, to)
	if err != nil {
		return err
	}
	c := getCall(tSend)
	c.send.from, c.send.to, c.send.target, c.send.payload = e.node, to, t, p
	if err := rc.do(ctx, c, e.timeout); err != nil {
		putCall(c)
		return err
	}
	delivered, sendErr, err := c.delivered, c.sendErr, c.err
	putCall(c)
	if err != nil {
		return err
	}
	if delivered {
		e.ctrs.Out(rdma.VerbSend)
	} else if errors.Is(sendErr, rdma.ErrUnreachable) {
		// Whoever listens there now is not that node (or is closing).
		e.peers.forget(to, rc)
	}
	return sendErr
}

// deliver hands an arriving message to the receive handler. delivered says
// whether the handler ran, which is when memfab counts a Send.
func (e *Endpoint) deliver(to rdma.NodeID, m rdma.Message) (delivered bool, err error) {
	if e.closed.Load() {
		return false, fmt.Errorf("%w: node %d is closed", rdma.ErrUnreachable, to)
	}
	if to != e.node {
		return false, fmt.Errorf("%w: node %d reached node %d's address", rdma.ErrUnreachable, to, e.node)
	}
	fn := e.recv.Load()
	if fn == nil {
		return false, fmt.Errorf("%w: node %d has no receive handler", rdma.ErrNotReady, to)
	}
	e.ctrs.In(rdma.VerbSend)
	return true, (*fn)(m)
}

func (ps *peerSide) accept() {
	log := ps.e.log
	var wg sync.WaitGroup
	defer wg.Wait()
	var backoff acceptBackoff
	for {
		c, err := ps.ln.Accept()
		if err != nil {
			ps.mu.RLock()
			closed := ps.closed
			ps.mu.RUnlock()
			if closed {
				return
			}
			if errors.Is(err, net.ErrClosed) {
				log.Error("tcpfab: peer listener closed; this node no longer receives Sends", zap.Error(err))
				return
			}
			backoff.failed(log, "peer port", err)
			continue
		}
		backoff.ok()
		ps.mu.Lock()
		if ps.closed {
			ps.mu.Unlock()
			_ = c.Close()
			return
		}
		ps.inbound[c] = struct{}{}
		ps.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ps.serveInbound(c)
			ps.mu.Lock()
			delete(ps.inbound, c)
			ps.mu.Unlock()
		}()
	}
}

// serveInbound receives Sends from one peer and acks each, flushing acks
// once no more Sends are buffered, or maxBacklog of them are queued.
// Anything but a well-formed Send closes the connection: only nodes of this
// domain have business here.
func (ps *peerSide) serveInbound(c net.Conn) {
	defer c.Close()
	log := ps.e.log
	if secret := ps.e.cfg.Secret; len(secret) > 0 {
		if err := acceptAuth(c, secret); err != nil {
			ps.e.refused.refuse(log, "tcpfab: closing unauthenticated peer connection", c.RemoteAddr().String(), err)
			return
		}
	}
	fr := newFrameReader(c)
	s := newSender(c)
	for {
		h, body, err := fr.next()
		if err == nil && h.Type != tSend {
			err = fmt.Errorf("%w: frame type %#02x on the peer port", errStream, h.Type)
		}
		var to rdma.NodeID
		var m rdma.Message
		if err == nil {
			_, to, m, err = decodeSend(body)
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return
			}
			log.Warn("tcpfab: closing peer connection", zap.Stringer("remote", c.RemoteAddr()), zap.Error(err))
			return
		}
		delivered, serr := ps.e.deliver(to, m)
		b, err := s.lock()
		if err != nil {
			return
		}
		b, at := beginFrame(b, tSendAck, 0, h.ID)
		s.unlock(endFrame(appendSendAck(b, delivered, serr), at))
		// A peer that keeps its Sends ahead of this reader would keep
		// fr.buffered() true, and its acks unwritten, for as long as it
		// likes (maxBacklog).
		if !fr.buffered() || s.queued() > maxBacklog {
			if err := s.flush(); err != nil {
				return
			}
		}
	}
}

// conns lists the live outbound connections.
func (ps *peerSide) conns() []*rpcConn {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	out := make([]*rpcConn, 0, len(ps.out))
	for _, p := range ps.out {
		if rc := p.rc.Load(); rc != nil {
			out = append(out, rc)
		}
	}
	return out
}

func (ps *peerSide) close() {
	ps.mu.Lock()
	ps.closed = true
	_ = ps.ln.Close()
	for c := range ps.inbound {
		_ = c.Close()
	}
	var outs []*rpcConn
	for _, p := range ps.out {
		if rc := p.rc.Load(); rc != nil {
			outs = append(outs, rc)
		}
	}
	ps.mu.Unlock()
	for _, rc := range outs {
		rc.fail(rdma.ErrClosed)
		<-rc.exited
	}
}
