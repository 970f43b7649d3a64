package tcpfab

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// DefaultTimeout bounds a verb whose context has no deadline, so that a
// memory node that vanishes without closing its connections (a cut link, a
// frozen host) cannot hang callers. A node killed outright is noticed at
// once: its kernel closes the connection.
const DefaultTimeout = 10 * time.Second

// Config configures an endpoint.
type Config struct {
	// Name is for the memory node's logs and metrics.
	Name string
	// PeerListen is where this node receives Sends (default "127.0.0.1:0").
	PeerListen string
	// Advertise is the address other nodes dial for Sends. Default: the
	// PeerListen address, with an unspecified IP replaced by the local IP
	// of the connection to the memory node.
	Advertise string
	// Timeout bounds verbs, Sends and control calls whose context has no
	// deadline: 0 means DefaultTimeout, negative means none.
	Timeout time.Duration
	Logger  *zap.Logger
	// Secret, if set, authenticates this node to the memory node and to
	// other nodes, and them to it (auth.go); every node of a memory node's
	// domain, and the memory node, must share it.
	Secret []byte
	// Refusals counts the connections to the peer port that failed the
	// secret's challenge, and samples them into the log (nil: the endpoint
	// keeps its own). Share one across endpoints to export one count that
	// outlives rejoins.
	Refusals *Refusals
}

// Endpoint is one node's attachment to a memory node over TCP. It implements
// rdma.Endpoint. It never reconnects: when the memory node goes away every
// verb fails with ErrUnreachable, and the owner rejoins with a new Dial (and
// gets a new NodeID).
type Endpoint struct {
	cfg     Config
	log     *zap.Logger
	node    rdma.NodeID
	layout  rdma.Layout
	known   []bool // registered regions by ID
	timeout time.Duration

	mn    *rpcConn
	ctrs  rdma.Counters
	recv  atomic.Pointer[func(rdma.Message) error]
	probe atomic.Pointer[func(uint64) rdma.Hold]

	closed  atomic.Bool
	stop    chan struct{} // closed by Close: ends the watchdog
	refused *Refusals     // cfg.Refusals, or the endpoint's own

	peers peerSide
	wg    sync.WaitGroup
}

var _ rdma.Endpoint = (*Endpoint)(nil)

// Dial connects to the memory node at addr and joins it.
func Dial(ctx context.Context, addr string, cfg Config) (*Endpoint, error) {
	if cfg.PeerListen == "" {
		cfg.PeerListen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	e := &Endpoint{cfg: cfg, log: cfg.Logger, timeout: cfg.Timeout, stop: make(chan struct{}), refused: cfg.Refusals}
	if e.refused == nil {
		e.refused = &Refusals{}
	}
	if e.timeout == 0 {
		e.timeout = DefaultTimeout
	}
	ln, err := net.Listen("tcp", cfg.PeerListen)
	if err != nil {
		return nil, fmt.Errorf("tcpfab: peer listener: %w", err)
	}
	var d net.Dialer
	if _, ok := ctx.Deadline(); !ok && e.timeout > 0 {
		d.Timeout = e.timeout
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("%w: memory node %s: %v", rdma.ErrUnreachable, addr, err)
	}
	if len(cfg.Secret) > 0 {
		if err := dialAuth(c, cfg.Secret); err != nil {
			_ = c.Close()
			_ = ln.Close()
			return nil, fmt.Errorf("memory node %s: %w", addr, err)
		}
	}
	e.mn = newRPCConn(c, "memory node "+addr, e.log)
	e.mn.unsolicited = e.onProbe
	e.mn.start()
	if e.timeout > 0 {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.watchdog()
		}()
	}

	adv := cfg.Advertise
	if adv == "" {
		adv = advertiseAddr(ln.Addr(), c.LocalAddr())
	}
	rep, err := e.join(ctx, rdma.JoinRequest{Name: cfg.Name, Addr: adv})
	if err != nil {
		_ = ln.Close()
		e.mn.fail(rdma.ErrClosed)
		<-e.mn.exited
		close(e.stop)
		e.wg.Wait()
		return nil, err
	}
	e.node, e.layout = rep.Node, rep.Layout
	for _, r := range rep.Layout.Regions {
		for int(r.ID) >= len(e.known) {
			e.known = append(e.known, false)
		}
		e.known[r.ID] = true
	}
	e.peers.init(e, ln, adv, rep.Peers)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.peers.accept()
	}()
	return e, nil
}

// watchdog enforces the default timeout on every connection of e, the peer
// connections included: Sends still work after the memory node is gone.
func (e *Endpoint) watchdog() {
	t := time.NewTicker(min(max(e.timeout/8, 5*time.Millisecond), 250*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case now := <-t.C:
			e.mn.expire(now)
			for _, rc := range e.peers.conns() {
				rc.expire(now)
			}
		}
	}
}

// advertiseAddr is the listener's address as others can dial it.
func advertiseAddr(ln, local net.Addr) string {
	la, ok := ln.(*net.TCPAddr)
	if !ok {
		return ln.String()
	}
	if la.IP.IsUnspecified() {
		if l, ok := local.(*net.TCPAddr); ok {
			return (&net.TCPAddr{IP: l.IP, Port: la.Port}).String()
		}
	}
	return la.String()
}

func (e *Endpoint) Node() rdma.NodeID                   { return e.node }
func (e *Endpoint) Layout() rdma.Layout                 { return e.layout }
func (e *Endpoint) Counters() *rdma.Counters            { return &e.ctrs }
func (e *Endpoint) Control() rdma.Control               { return control{e} }
func (e *Endpoint) Bind(fn func(rdma.Message) error)    { e.recv.Store(&fn) }
func (e *Endpoint) BindProbe(fn func(uint64) rdma.Hold) { e.probe.Store(&fn) }

// Refused is the number of connections to the peer port that failed the
// fabric secret's challenge (of all endpoints sharing Config.Refusals).
func (e *Endpoint) Refused() uint64 { return e.refused.Count() }

// PeerAddr is where this endpoint receives Sends, as advertised.
func (e *Endpoint) PeerAddr() string { return e.peers.self }

// Close leaves the memory node (best effort, bounded by a second) and closes
// every connection. Later verbs return ErrClosed; Sends to this node fail as
// they would to a dead one.
func (e *Endpoint) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	e.peers.close()
	c := getCall(tLeave)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = e.mn.do(ctx, c, 0)
	putCall(c)
	cancel()
	e.mn.fail(rdma.ErrClosed)
	<-e.mn.exited
	close(e.stop)
	e.wg.Wait()
	return nil
}

func (e *Endpoint) check(ctx context.Context) error {
	if e.closed.Load() {
		return rdma.ErrClosed
	}
	return ctx.Err()
}

func (e *Endpoint) registered(r rdma.RegionID) bool { return int(r) < len(e.known) && e.known[r] }

// verb runs one verb. Counting follows memfab: a verb counts (with its
// doorbell) once the memory node has admitted it to a registered region.
func (e *Endpoint) verb(ctx context.Context, op *rdma.Op) (rdma.U128, error) {
	if err := e.check(ctx); err != nil {
		return rdma.U128{}, err
	}
	if !e.registered(op.Addr.Region) {
		return rdma.U128{}, fmt.Errorf("%w: %d", rdma.ErrUnknownRegion, op.Addr.Region)
	}
	if (op.Verb == rdma.VerbRead || op.Verb == rdma.VerbWrite) && len(op.Buf) > MaxFrame-opFixed-8 {
		return rdma.U128{}, fmt.Errorf("%w: %d bytes is more than one frame carries", rdma.ErrBadRequest, len(op.Buf))
	}
	c := getCall(tVerb)
	c.op = *op
	if err := e.mn.do(ctx, c, e.timeout); err != nil {
		putCall(c)
		return rdma.U128{}, err
	}
	old, err := c.op.Old, c.op.Err
	if c.err != nil {
		err = c.err
	} else {
		e.ctrs.Out(op.Verb)
		e.ctrs.Out(rdma.VerbBatch)
	}
	putCall(c)
	return old, err
}

func (e *Endpoint) Read(ctx context.Context, a rdma.Addr, p []byte) error {
	_, err := e.verb(ctx, &rdma.Op{Verb: rdma.VerbRead, Addr: a, Buf: p})
	return err
}

func (e *Endpoint) Write(ctx context.Context, a rdma.Addr, p []byte) error {
	_, err := e.verb(ctx, &rdma.Op{Verb: rdma.VerbWrite, Addr: a, Buf: p})
	return err
}

var all = rdma.U128{Lo: ^uint64(0), Hi: ^uint64(0)}

func (e *Endpoint) CAS(ctx context.Context, a rdma.Addr, cmp, swap uint64) (uint64, error) {
	old, err := e.verb(ctx, &rdma.Op{Verb: rdma.VerbCAS, Addr: a, Compare: rdma.U64(cmp), CompareMask: rdma.U64(all.Lo), Value: rdma.U64(swap), Mask: rdma.U64(all.Lo)})
	return old.Lo, err
}

func (e *Endpoint) FAA(ctx context.Context, a rdma.Addr, add uint64) (uint64, error) {
	old, err := e.verb(ctx, &rdma.Op{Verb: rdma.VerbFAA, Addr: a, Value: rdma.U64(add)})
	return old.Lo, err
}

func (e *Endpoint) MaskedCAS64(ctx context.Context, a rdma.Addr, cmp, cmpMask, swap, swapMask uint64) (uint64, error) {
	old, err := e.verb(ctx, &rdma.Op{Verb: rdma.VerbMaskedCAS, Addr: a, Compare: rdma.U64(cmp), CompareMask: rdma.U64(cmpMask), Value: rdma.U64(swap), Mask: rdma.U64(swapMask)})
	return old.Lo, err
}

func (e *Endpoint) MaskedFAA64(ctx context.Context, a rdma.Addr, add, boundary uint64) (uint64, error) {
	old, err := e.verb(ctx, &rdma.Op{Verb: rdma.VerbMaskedFAA, Addr: a, Value: rdma.U64(add), Mask: rdma.U64(boundary)})
	return old.Lo, err
}

func (e *Endpoint) MaskedCAS128(ctx context.Context, a rdma.Addr, cmp, cmpMask, swap, swapMask rdma.U128) (rdma.U128, error) {
	return e.verb(ctx, &rdma.Op{Verb: rdma.VerbMaskedCAS, Wide: true, Addr: a, Compare: cmp, CompareMask: cmpMask, Value: swap, Mask: swapMask})
}

func (e *Endpoint) MaskedFAA128(ctx context.Context, a rdma.Addr, add, boundary rdma.U128) (rdma.U128, error) {
	return e.verb(ctx, &rdma.Op{Verb: rdma.VerbMaskedFAA, Wide: true, Addr: a, Value: add, Mask: boundary})
}

// Post sends the whole batch in one frame; the memory node executes it in
// order and answers in one frame.
func (e *Endpoint) Post(ctx context.Context, b *rdma.Batch) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	if len(b.Ops) > maxBatch {
		return fmt.Errorf("%w: %d verbs in one batch (max %d)", rdma.ErrBadRequest, len(b.Ops), maxBatch)
	}
	reqSize, reserve, wire := 0, 0, 0
	for i := range b.Ops {
		op := &b.Ops[i]
		n := opReqSize(op)
		if n < 0 {
			continue // not a memory verb: it fails on its own, as in memfab
		}
		wire++
		reqSize += n
		reserve += opReplyReserve(op.Verb, op.Wide, len(op.Buf))
	}
	if reqSize > MaxFrame || reserve > MaxFrame {
		return fmt.Errorf("%w: batch needs %d/%d bytes, more than one frame carries", rdma.ErrBadRequest, reqSize, reserve)
	}
	c := getCall(tBatch)
	c.batch, c.wire = b, wire
	if err := e.mn.do(ctx, c, e.timeout); err != nil {
		putCall(c)
		return err
	}
	err := c.err
	putCall(c)
	if err != nil {
		return err
	}
	e.ctrs.Out(rdma.VerbBatch)
	for i := range b.Ops {
		if e.registered(b.Ops[i].Addr.Region) {
			e.ctrs.Out(b.Ops[i].Verb)
		}
	}
	return nil
}

// join runs the Join control call.
func (e *Endpoint) join(ctx context.Context, req rdma.JoinRequest) (rdma.JoinReply, error) {
	return controlCall(ctx, e, tJoin, appendJoinRequest(nil, req), decodeJoinReply)
}

// controlCall sends a control request and decodes its reply with decode.
func controlCall[T any](ctx context.Context, e *Endpoint, typ uint8, req []byte, decode func([]byte) (T, error)) (T, error) {
	var zero T
	c := getCall(typ)
	c.req = req
	defer putCall(c)
	if err := e.mn.do(ctx, c, e.timeout); err != nil {
		return zero, err
	}
	if c.err != nil {
		return zero, c.err
	}
	rep, err := decode(c.body)
	if err != nil {
		return zero, fmt.Errorf("%w: %s: bad control reply: %v", rdma.ErrUnreachable, e.mn.what, err)
	}
	return rep, nil
}

// countedCall is a controlCall that counts as one control verb once
// answered: every control call but Join.
func countedCall[T any](ctx context.Context, e *Endpoint, typ uint8, req []byte, decode func([]byte) (T, error)) (T, error) {
	rep, err := controlCall(ctx, e, typ, req, decode)
	if err == nil {
		e.ctrs.Out(rdma.VerbControl)
	}
	return rep, err
}

func (e *Endpoint) fetchPeers(ctx context.Context) ([]rdma.Peer, error) {
	return countedCall(ctx, e, tPeers, nil, decodePeers)
}

// Attach sends an ATTACH request over the control connection (behind the
// fabric secret, if any) and returns the memory node's reply body: how
// another fabric (rdma/verbs) sets up its own connection to the memory node.
func (e *Endpoint) Attach(ctx context.Context, req []byte) ([]byte, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	return countedCall(ctx, e, tAttach, req, func(p []byte) ([]byte, error) {
		return append([]byte(nil), p...), nil // p goes back to the call pool
	})
}

// Broken is closed once the control connection to the memory node has
// failed (the memory node died or cut it): a fabric layered on this one
// fails its own verbs then, as this endpoint's do.
func (e *Endpoint) Broken() <-chan struct{} { return e.mn.broken }

type control struct{ e *Endpoint }

func (c control) Peers(ctx context.Context) ([]rdma.Peer, error) {
	if err := c.e.check(ctx); err != nil {
		return nil, err
	}
	ps, err := c.e.fetchPeers(ctx)
	if err == nil {
		c.e.peers.learn(ps)
	}
	return ps, err
}

func (c control) Recover(ctx context.Context, req rdma.RecoverRequest) (rdma.RecoverReply, error) {
	if err := c.e.check(ctx); err != nil {
		return rdma.RecoverReply{}, err
	}
	return countedCall(ctx, c.e, tRecover, appendRecoverRequest(nil, req), decodeRecoverReply)
}

// Range implements rdma.RangeControl.
func (c control) Range(ctx context.Context, req rdma.RangeRequest) (rdma.RangeReply, error) {
	if err := c.e.check(ctx); err != nil {
		return rdma.RangeReply{}, err
	}
	return countedCall(ctx, c.e, tRange, appendRangeRequest(nil, req), decodeRangeReply)
}

var _ rdma.RangeControl = control{}

// onProbe answers the memory node's probe on a goroutine of its own: the
// handler is the lock layer's and may take its locks, which must never stall
// the reader that completes everyone's verbs.
func (e *Endpoint) onProbe(h header, body []byte) error {
	if h.Type != tProbe || len(body) != 8 {
		return fmt.Errorf("%w: unexpected frame type %#02x", errStream, h.Type)
	}
	entry := binary.LittleEndian.Uint64(body)
	go func() {
		hold := rdma.HoldActive
		if fn := e.probe.Load(); fn != nil {
			hold = (*fn)(entry)
		}
		e.mn.reply(tProbeReply, h.ID, []byte{byte(hold)})
	}()
	return nil
}
