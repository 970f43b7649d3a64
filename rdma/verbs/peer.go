//go:build verbs

package verbs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/verbs/ibv"
)

// Queue pairs between members carry Sends one way and their
// acknowledgements the other: a member sets up its own queue pair to each
// member it sends to (the dialer's out connection, the receiver's in
// connection), so that neither side ever sends on a queue pair whose far
// end is not connected yet.
const (
	peerBufs    = 32           // receive (and send) buffers per queue pair
	peerCredits = peerBufs / 2 // Sends in flight on one out connection
)

type peers struct {
	e      *Endpoint
	mu     sync.Mutex
	out    map[rdma.NodeID]*peerConn
	in     map[*peerConn]struct{}
	hs     map[uint32]chan handshake
	all    map[*peerConn]struct{} // every connection not yet destroyed
	closed bool
	bg     sync.WaitGroup // background destroys, done before the device closes
}

func (p *peers) init(e *Endpoint) {
	p.e = e
	p.out = map[rdma.NodeID]*peerConn{}
	p.in = map[*peerConn]struct{}{}
	p.hs = map[uint32]chan handshake{}
	p.all = map[*peerConn]struct{}{}
}

// peerConn is one queue pair to another member.
type peerConn struct {
	p    *peers
	node rdma.NodeID
	out  bool
	id   uint32
	psn  uint32

	mu        sync.RWMutex // read-held while posting; write-held to destroy
	destroyed bool
	qpMem

	ready    chan struct{} // out: closed once connected, or failed
	readyErr error

	sendFree chan int
	credits  chan struct{}
	amu      sync.Mutex
	acks     [][]byte // acknowledgements waiting for a send buffer (in)

	pmu     sync.Mutex
	pending map[uint32]chan *PeerAck
	seq     uint32

	deadOnce sync.Once
	dead     chan struct{}
	deadErr  error
}

func (p *peers) newConn(node rdma.NodeID, out bool) (*peerConn, error) {
	e := p.e
	c := &peerConn{p: p, node: node, out: out, ready: make(chan struct{}), dead: make(chan struct{}),
		sendFree: make(chan int, peerBufs), credits: make(chan struct{}, peerCredits), pending: map[uint32]chan *PeerAck{},
		psn: rand.Uint32() & (1<<24 - 1)}
	var err error
	if c.qpMem, err = e.dev.newQPMem(2*peerBufs*peerMsgMax, 2*peerBufs, peerBufs); err != nil {
		return nil, err
	}
	c.id = e.dev.register(c)
	p.mu.Lock()
	p.all[c] = struct{}{} // before anything can fail: destroy takes it out
	p.mu.Unlock()
	for i := 0; i < peerBufs; i++ {
		c.sendFree <- i
	}
	for i := 0; i < peerCredits; i++ {
		c.credits <- struct{}{}
	}
	return c, nil
}

func (c *peerConn) info() QPInfo {
	return QPInfo{QPN: c.qp.Num, PSN: c.psn, GID: c.p.e.dev.dev.Caps().GID}
}

func (c *peerConn) recvAddr(i int) uintptr { return c.mr.Addr + uintptr(i*peerMsgMax) }
func (c *peerConn) sendOff(i int) int      { return (peerBufs + i) * peerMsgMax }

func (c *peerConn) postRecv(i int) error {
	return c.qp.PostRecv(wrID(kPeerRecv, c.id, i), c.recvAddr(i), peerMsgMax, c.mr.LKey)
}

// connect joins the queue pair to the far end's and posts its receive
// buffers (a queue pair in RESET takes none), before anything can arrive:
// an in connection replies to the handshake after this, an out connection
// sends (and so gets acknowledgements) after it.
func (c *peerConn) connect(far QPInfo) error {
	if err := c.qp.Connect(far.QPN, far.PSN, c.psn, far.GID, connParams(0)); err != nil {
		return err
	}
	for i := 0; i < peerBufs; i++ {
		if err := c.postRecv(i); err != nil {
			return err
		}
	}
	return nil
}

// kill marks the connection dead, fails its Sends in flight, and destroys
// it in the background (never on the poller, which holds it read-locked).
func (c *peerConn) kill(err error) {
	c.deadOnce.Do(func() {
		c.deadErr = err
		close(c.dead)
		p := c.p
		p.mu.Lock()
		if p.out[c.node] == c {
			delete(p.out, c.node)
		}
		delete(p.in, c)
		if p.closed {
			// destroyAll has it, after the poller stopped.
			p.mu.Unlock()
			return
		}
		p.bg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.bg.Done()
			c.destroy()
		}()
	})
}

func (c *peerConn) destroy() {
	// No delivery after this, and none under way: the poller holds c.mu
	// read-locked while it delivers, so unregister comes before locking.
	c.p.e.dev.unregister(c.id)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return
	}
	c.destroyed = true
	c.p.mu.Lock()
	delete(c.p.all, c)
	c.p.mu.Unlock()
	destroyQPMem(c.qpMem)
}

// post sends msg (encoded by enc into a send buffer) on the connection.
func (c *peerConn) post(idx int, msg []byte) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.destroyed {
		return fmt.Errorf("%w: queue pair to node %d is gone", rdma.ErrUnreachable, c.node)
	}
	off := c.sendOff(idx)
	n := copy(c.mem[off:off+peerMsgMax], msg)
	c.p.e.dev.kick()
	return c.qp.PostSend([]ibv.WR{{ID: wrID(kPeerSend, c.id, idx), Opcode: ibv.OpSend, Flags: ibv.SendSignaled,
		LocalAddr: uint64(c.mr.Addr) + uint64(off), LocalLen: uint32(n), LKey: c.mr.LKey}})
}

func (c *peerConn) complete(kind uint8, idx int, wc *ibv.WC) {
	e := c.p.e
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.destroyed {
		return
	}
	if wc.Status != ibv.StatusSuccess {
		c.kill(fmt.Errorf("%w: queue pair to node %d: %w", rdma.ErrUnreachable, c.node, statusErr(wc)))
		return
	}
	switch kind {
	case kPeerSend:
		c.amu.Lock()
		var next []byte
		if len(c.acks) > 0 {
			next = c.acks[0]
			c.acks = c.acks[1:]
		}
		c.amu.Unlock()
		if next == nil {
			c.sendFree <- idx
			return
		}
		c.postLocked(idx, next)
	case kPeerRecv:
		buf := c.mem[idx*peerMsgMax : idx*peerMsgMax+int(wc.ByteLen)]
		data, ack, err := decodePeer(buf)
		if err != nil {
			c.kill(fmt.Errorf("%w: malformed message from node %d: %v", rdma.ErrUnreachable, c.node, err))
			return
		}
		if ack != nil {
			if err := c.postRecv(idx); err != nil {
				c.kill(fmt.Errorf("%w: %v", rdma.ErrUnreachable, err))
				return
			}
			c.pmu.Lock()
			ch := c.pending[ack.Seq]
			delete(c.pending, ack.Seq)
			c.pmu.Unlock()
			if ch != nil {
				ch <- ack
			}
			c.credits <- struct{}{}
			return
		}
		m := rdma.Message{From: data.From, To: data.Target, Payload: data.Payload}
		seq := data.Seq
		// The handler must not block (rdma.Endpoint.Bind); the buffer is
		// free again once it returns.
		a := PeerAck{Seq: seq}
		switch {
		case data.To != e.node || data.From != c.node:
			a.Err = fmt.Errorf("%w: a Send for node %d from node %d reached node %d", rdma.ErrUnreachable, data.To, data.From, e.node)
		case e.closed.Load():
			a.Err = fmt.Errorf("%w: node %d is closing", rdma.ErrUnreachable, e.node)
		default:
			if fn := e.recv.Load(); fn == nil {
				a.Err = fmt.Errorf("%w: node %d has no receive handler", rdma.ErrNotReady, e.node)
			} else {
				e.ctrs.In(rdma.VerbSend)
				e.wire.peerRecvs.Add(1)
				// Delivered: the handler ran, whatever it answered. The
				// sender counts the Send then, as memfab and tcpfab do: a
				// refusal (a slot that gave up waiting) crossed the fabric
				// as much as an acceptance did.
				a.Err = (*fn)(m)
				a.Delivered = true
			}
		}
		if err := c.postRecv(idx); err != nil {
			c.kill(fmt.Errorf("%w: %v", rdma.ErrUnreachable, err))
			return
		}
		msg := a.encode(nil)
		e.wire.peerAcks.Add(1)
		select {
		case i := <-c.sendFree:
			c.postLocked(i, msg)
		default:
			// Every send buffer is in flight: the next send completion
			// takes this acknowledgement.
			c.amu.Lock()
			c.acks = append(c.acks, msg)
			c.amu.Unlock()
		}
	}
}

// postLocked posts msg on send buffer idx; the caller holds c.mu.
func (c *peerConn) postLocked(idx int, msg []byte) {
	off := c.sendOff(idx)
	n := copy(c.mem[off:off+peerMsgMax], msg)
	err := c.qp.PostSend([]ibv.WR{{ID: wrID(kPeerSend, c.id, idx), Opcode: ibv.OpSend, Flags: ibv.SendSignaled,
		LocalAddr: uint64(c.mr.Addr) + uint64(off), LocalLen: uint32(n), LKey: c.mr.LKey}})
	if err != nil {
		c.kill(fmt.Errorf("%w: %v", rdma.ErrUnreachable, err))
	}
}

// send delivers one Send and waits for its acknowledgement.
func (c *peerConn) send(ctx context.Context, m PeerData, timeout <-chan time.Time) (*PeerAck, error) {
	e := c.p.e
	select {
	case <-c.credits:
	case <-c.dead:
		return nil, c.deadErr
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timeout:
		return nil, fmt.Errorf("%w: node %d acknowledged nothing in %v", rdma.ErrUnreachable, c.node, e.timeout)
	}
	var idx int
	select {
	case idx = <-c.sendFree:
	case <-c.dead:
		return nil, c.deadErr
	}
	ch := make(chan *PeerAck, 1)
	c.pmu.Lock()
	c.seq++
	m.Seq = c.seq
	c.pending[m.Seq] = ch
	c.pmu.Unlock()
	e.wire.peerSends.Add(1)
	if err := c.post(idx, m.encode(nil)); err != nil {
		c.kill(fmt.Errorf("%w: %v", rdma.ErrUnreachable, err))
		return nil, c.deadErr
	}
	forget := func() {
		c.pmu.Lock()
		delete(c.pending, m.Seq)
		c.pmu.Unlock()
	}
	select {
	case a := <-ch:
		return a, nil
	case <-c.dead:
		forget()
		return nil, c.deadErr
	case <-ctx.Done():
		forget()
		return nil, ctx.Err()
	case <-timeout:
		forget()
		return nil, fmt.Errorf("%w: node %d acknowledged nothing in %v", rdma.ErrUnreachable, c.node, e.timeout)
	}
}

// Send delivers p to target t of node to on a queue pair of its own and
// waits for the receiver's acknowledgement, which carries its handler's
// answer. The first Send to a node sets the queue pair up (a handshake over
// the peer ports).
func (e *Endpoint) Send(ctx context.Context, to rdma.NodeID, t rdma.Target, p rdma.Payload) error {
	if e.closed.Load() {
		return rdma.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if to == e.node {
		fn := e.recv.Load()
		if fn == nil {
			return fmt.Errorf("%w: node %d has no receive handler", rdma.ErrNotReady, to)
		}
		e.ctrs.In(rdma.VerbSend)
		e.ctrs.Out(rdma.VerbSend)
		return (*fn)(rdma.Message{From: to, To: t, Payload: p})
	}
	var timeout <-chan time.Time
	if _, ok := ctx.Deadline(); !ok && e.timeout > 0 {
		tm := time.NewTimer(e.timeout)
		defer tm.Stop()
		timeout = tm.C
	}
	c, err := e.peers.get(ctx, to, timeout)
	if err != nil {
		return err
	}
	a, err := c.send(ctx, PeerData{From: e.node, To: to, Target: t, Payload: p}, timeout)
	if err != nil {
		return err
	}
	if a.Delivered {
		e.ctrs.Out(rdma.VerbSend)
	}
	return a.Err
}

// get returns the out connection to node, setting it up if needed.
func (p *peers) get(ctx context.Context, node rdma.NodeID, timeout <-chan time.Time) (*peerConn, error) {
	p.mu.Lock()
	c := p.out[node]
	p.mu.Unlock()
	if c == nil {
		nc, err := p.newConn(node, true)
		if err != nil {
			return nil, fmt.Errorf("%w: queue pair to node %d: %v", rdma.ErrUnreachable, node, err)
		}
		p.mu.Lock()
		closed := p.closed
		if c = p.out[node]; c == nil && !closed {
			c = nc
			p.out[node] = c
			go p.dial(c)
		}
		p.mu.Unlock()
		if c != nc {
			nc.destroy() // another Send set one up meanwhile, or closing
		}
		if closed {
			return nil, rdma.ErrClosed
		}
	}
	select {
	case <-c.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timeout:
		return nil, fmt.Errorf("%w: no queue pair to node %d in time", rdma.ErrUnreachable, node)
	}
	if c.readyErr != nil {
		return nil, c.readyErr
	}
	return c, nil
}

// dial runs the handshake for an out connection: a request over the peer
// ports carrying this queue pair, a reply carrying the far end's.
func (p *peers) dial(c *peerConn) {
	e := p.e
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	id := rand.Uint32()
	ch := make(chan handshake, 1)
	p.mu.Lock()
	p.hs[id] = ch
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.hs, id)
		p.mu.Unlock()
	}()
	err := e.ctl.Send(ctx, c.node, HandshakeTarget, handshake{Kind: hsRequest, ID: id, QP: c.info()}.payload())
	if err == nil {
		select {
		case h := <-ch:
			if h.Kind == hsRefuse {
				err = fmt.Errorf("%w: node %d could not set up a queue pair", rdma.ErrNotReady, c.node)
			} else {
				err = c.connect(h.QP)
				if err != nil {
					err = fmt.Errorf("%w: queue pair to node %d: %v", rdma.ErrUnreachable, c.node, err)
				}
			}
		case <-ctx.Done():
			err = fmt.Errorf("%w: node %d did not answer the queue-pair handshake: %v", rdma.ErrUnreachable, c.node, ctx.Err())
		}
	}
	if err != nil {
		c.readyErr = err
		close(c.ready)
		c.kill(err)
		return
	}
	e.wire.handshakes.Add(1)
	close(c.ready)
}

// accept answers a handshake request from node: an in connection to the
// requester's queue pair, and a reply naming it.
func (p *peers) accept(node rdma.NodeID, h handshake) {
	e := p.e
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	reply := handshake{Kind: hsRefuse, ID: h.ID}
	var c *peerConn
	if !closed {
		var err error
		c, err = p.newConn(node, false)
		if err == nil {
			if err = c.connect(h.QP); err != nil {
				c.destroy()
				c = nil
			}
		}
		if err != nil {
			e.log.Warn("verbs: refusing a queue pair to a member", zap.Uint16("node", uint16(node)), zap.Error(err))
		} else {
			p.mu.Lock()
			p.in[c] = struct{}{}
			p.mu.Unlock()
			reply = handshake{Kind: hsReply, ID: h.ID, QP: c.info()}
		}
	}
	if err := e.ctl.Send(ctx, node, HandshakeTarget, reply.payload()); err != nil && c != nil {
		c.kill(fmt.Errorf("%w: handshake reply to node %d: %v", rdma.ErrUnreachable, node, err))
	}
}

// onControl receives the Sends that reach this member over tcpfab:
// handshakes, and Sends from members that use tcpfab rather than verbs,
// which go to the receive handler as any other.
func (e *Endpoint) onControl(m rdma.Message) error {
	if m.To != HandshakeTarget {
		fn := e.recv.Load()
		if fn == nil {
			return fmt.Errorf("%w: node %d has no receive handler", rdma.ErrNotReady, e.node)
		}
		e.ctrs.In(rdma.VerbSend)
		return (*fn)(m)
	}
	h, err := parseHandshake(m.Payload)
	if err != nil {
		return err
	}
	p := &e.peers
	switch h.Kind {
	case hsRequest:
		go p.accept(m.From, h)
	case hsReply, hsRefuse:
		p.mu.Lock()
		ch := p.hs[h.ID]
		p.mu.Unlock()
		if ch == nil {
			return fmt.Errorf("%w: no handshake %#x in progress", rdma.ErrNotReady, h.ID)
		}
		select {
		case ch <- h:
		default:
		}
	case hsBye:
		p.lost(m.From)
	}
	return nil
}

// lost drops every connection with node, which said it is leaving: Sends
// to it fail at once instead of after the transport's retries.
func (p *peers) lost(node rdma.NodeID) {
	p.mu.Lock()
	var cs []*peerConn
	if c := p.out[node]; c != nil {
		cs = append(cs, c)
	}
	for c := range p.in {
		if c.node == node {
			cs = append(cs, c)
		}
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.kill(fmt.Errorf("%w: node %d left", rdma.ErrUnreachable, node))
	}
}

// close tells every member this one has queue pairs with that it is
// leaving, briefly and in parallel, and stops new connections.
func (p *peers) close() {
	p.mu.Lock()
	p.closed = true
	nodes := map[rdma.NodeID]bool{}
	for n := range p.out {
		nodes[n] = true
	}
	for c := range p.in {
		nodes[c.node] = true
	}
	p.mu.Unlock()
	e := p.e
	if e.ctl == nil {
		return
	}
	var wg sync.WaitGroup
	for n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			_ = e.ctl.Send(ctx, n, HandshakeTarget, handshake{Kind: hsBye}.payload())
		}()
	}
	wg.Wait()
}

// destroyAll destroys every connection, once the poller has stopped and
// before the device closes.
func (p *peers) destroyAll() {
	p.mu.Lock()
	p.closed = true
	var cs []*peerConn
	for c := range p.all {
		cs = append(cs, c)
	}
	p.out = map[rdma.NodeID]*peerConn{}
	p.in = map[*peerConn]struct{}{}
	p.mu.Unlock()
	for _, c := range cs {
		c.deadOnce.Do(func() {
			c.deadErr = rdma.ErrClosed
			close(c.dead)
		})
		c.destroy()
	}
	p.bg.Wait()
}
