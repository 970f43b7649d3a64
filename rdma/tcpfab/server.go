package tcpfab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// ErrServerClosed is returned by Server.Serve after Close.
var ErrServerClosed = errors.New("tcpfab: server closed")

// Server serves one memory node's regions and control path over TCP. Verbs
// execute through the Host's Memory, exactly as memfab executes them, on the
// connection's reader goroutine, so a connection's verbs complete in order.
type Server struct {
	host rdma.Host
	log  *zap.Logger

	mu     sync.Mutex
	lns    map[net.Listener]struct{}
	conns  map[*sconn]struct{}
	byNode map[rdma.NodeID]*sconn
	closed bool
	wg     sync.WaitGroup
	secret []byte // RequireSecret

	refused      Refusals
	acceptFailed atomic.Uint64

	attach AttachFunc // OnAttach
}

// AttachFunc sets up another fabric's connection for a joined member, over
// this control connection and so behind the fabric secret (rdma/verbs
// exchanges queue pair numbers, GIDs and remote keys this way). It gets the
// member's NodeID, the host it connects from and the request body, and
// returns the reply body and a function that tears the set-up down; the
// server calls it once, when the member leaves or its control connection
// ends, whichever is first. ctx ends with the connection.
type AttachFunc func(ctx context.Context, node rdma.NodeID, from string, req []byte) (rep []byte, detach func(), err error)

// OnAttach installs fn as the handler of ATTACH requests (PROTOCOL.md).
// Without one they are refused. Call it before Serve.
func (s *Server) OnAttach(fn AttachFunc) {
	s.mu.Lock()
	s.attach = fn
	s.mu.Unlock()
}

// AcceptFailures counts accepts that failed and were retried (out of file
// descriptors, mostly).
func (s *Server) AcceptFailures() uint64 { return s.acceptFailed.Load() }

// acceptBackoff is how a listener outlives failed accepts, out of file
// descriptors mostly: it pauses, growing to a second, and tries again,
// while the kernel keeps the connection queued. Giving up would end the
// memory node's service, or a proxy's receipt of handovers, for good.
type acceptBackoff struct {
	pause  time.Duration
	logged time.Time
}

func (a *acceptBackoff) failed(log *zap.Logger, what string, err error) {
	if time.Since(a.logged) >= time.Minute {
		a.logged = time.Now()
		log.Error("tcpfab: accepting a connection failed; retrying (if the process is out of file descriptors, raise its limit: ulimit -n or LimitNOFILE)",
			zap.String("listener", what), zap.Error(err))
	}
	a.pause = min(max(2*a.pause, 5*time.Millisecond), time.Second)
	time.Sleep(a.pause)
}

func (a *acceptBackoff) ok() { a.pause = 0 }

// Refused is the number of connections closed because they failed the
// fabric secret's challenge; the log shows only a sample of them.
func (s *Server) Refused() uint64 { return s.refused.Count() }

// RequireSecret has every connection accepted from now on authenticate
// with secret (auth.go) before any frame of it is read. Call it before
// Serve.
func (s *Server) RequireSecret(secret []byte) {
	s.mu.Lock()
	s.secret = append([]byte(nil), secret...)
	s.mu.Unlock()
}

var _ rdma.Prober = (*Server)(nil)

// NewServer returns a server for host and installs it as host's prober.
func NewServer(host rdma.Host, log *zap.Logger) *Server {
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{
		host: host, log: log,
		lns:    map[net.Listener]struct{}{},
		conns:  map[*sconn]struct{}{},
		byNode: map[rdma.NodeID]*sconn{},
	}
	host.SetProber(s)
	return s
}

// Serve serves host on ln until ctx is done, then closes every connection
// and returns nil; it returns early with the error if ln fails.
func Serve(ctx context.Context, ln net.Listener, host rdma.Host, log *zap.Logger) error {
	s := NewServer(host, log)
	stop := context.AfterFunc(ctx, func() { _ = s.Close() })
	defer stop()
	err := s.Serve(ln)
	if ctx.Err() != nil {
		return nil
	}
	_ = s.Close()
	return err
}

// Serve accepts connections on ln until ln fails or the server is closed.
func (s *Server) Serve(ln net.Listener) error {
	if !s.track(ln, func() { s.lns[ln] = struct{}{} }) {
		return ErrServerClosed
	}
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
	}()
	var backoff acceptBackoff
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors, mostly: the members already
			// connected go on, and so must the listener.
			s.acceptFailed.Add(1)
			backoff.failed(s.log, "memory node", err)
			continue
		}
		backoff.ok()
		sc := &sconn{srv: s, c: c, s: newSender(c), remote: c.RemoteAddr().String(),
			probes: map[uint32]chan rdma.Hold{}, gone: make(chan struct{})}
		sc.ctx, sc.cancel = context.WithCancel(context.Background())
		if !s.track(c, func() { s.conns[sc] = struct{}{}; s.wg.Add(1) }) {
			sc.cancel()
			return ErrServerClosed
		}
		go sc.serve()
	}
}

// track runs add, which records c for Close, unless the server is closed;
// then it closes c and returns false.
func (s *Server) track(c io.Closer, add func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return false
	}
	add()
	return true
}

// Close stops accepting, closes every connection and waits for their
// goroutines. Members are not told to leave: to the memory node a closed
// connection is a silent member, which heartbeats decide about.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for ln := range s.lns {
		_ = ln.Close()
	}
	for sc := range s.conns {
		_ = sc.c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Probe implements rdma.Prober: it asks the member over its own connection.
func (s *Server) Probe(ctx context.Context, n rdma.NodeID, entry uint64) (rdma.Hold, error) {
	s.mu.Lock()
	sc := s.byNode[n]
	s.mu.Unlock()
	if sc == nil {
		return 0, fmt.Errorf("%w: node %d has no connection", rdma.ErrUnreachable, n)
	}
	ch := make(chan rdma.Hold, 1)
	sc.pmu.Lock()
	sc.nextProbe++
	id := sc.nextProbe
	sc.probes[id] = ch
	sc.pmu.Unlock()
	defer func() {
		sc.pmu.Lock()
		delete(sc.probes, id)
		sc.pmu.Unlock()
	}()
	b, err := sc.s.lock()
	if err == nil {
		b = appendHeader(b, header{Len: 8, Type: tProbe, ID: id})
		sc.s.unlock(binary.LittleEndian.AppendUint64(b, entry))
		err = sc.s.flush()
	}
	if err != nil {
		return 0, fmt.Errorf("%w: probe of node %d: %v", rdma.ErrUnreachable, n, err)
	}
	select {
	case h := <-ch:
		return h, nil
	case <-sc.gone:
		return 0, fmt.Errorf("%w: node %d disconnected during probe", rdma.ErrUnreachable, n)
	case <-ctx.Done():
		return 0, fmt.Errorf("%w: probe of node %d: %v", rdma.ErrUnreachable, n, ctx.Err())
	}
}

// sconn is the memory node's side of one member's connection.
type sconn struct {
	srv    *Server
	c      net.Conn
	s      *sender
	remote string

	// Owned by the reader goroutine.
	joined bool
	node   rdma.NodeID
	ops    []wireOp

	pmu       sync.Mutex
	probes    map[uint32]chan rdma.Hold
	nextProbe uint32

	ctx    context.Context // cancels control calls when the connection ends
	cancel context.CancelFunc
	gone   chan struct{}
	calls  sync.WaitGroup

	dmu     sync.Mutex
	detach  []func() // of the ATTACH set-ups made on this connection
	leaving bool     // no more set-ups: the member left or the connection ended
}

// detachAll tears down every ATTACH set-up of the connection, once.
func (sc *sconn) detachAll() {
	sc.dmu.Lock()
	fs := sc.detach
	sc.detach, sc.leaving = nil, true
	sc.dmu.Unlock()
	for _, f := range fs {
		f()
	}
}

// maxBacklog bounds the replies a connection's reader queues before it
// writes them. It writes once it has answered every request it has read,
// but a peer that pipelines requests faster than it reads their replies
// keeps its reader's buffer full: 64 KiB of READ requests of a megabyte
// each queued 2 GB of replies before the first write, and a peer that
// never read could do it again and again.
const maxBacklog = 1 << 20

func (sc *sconn) serve() {
	log := sc.srv.log
	defer func() {
		sc.cancel()
		close(sc.gone)
		_ = sc.c.Close()
		sc.calls.Wait()
		sc.detachAll()
		sc.srv.mu.Lock()
		delete(sc.srv.conns, sc)
		if sc.joined && sc.srv.byNode[sc.node] == sc {
			delete(sc.srv.byNode, sc.node)
		}
		sc.srv.mu.Unlock()
		sc.srv.wg.Done()
	}()
	sc.srv.mu.Lock()
	secret := sc.srv.secret
	sc.srv.mu.Unlock()
	if len(secret) > 0 {
		if err := acceptAuth(sc.c, secret); err != nil {
			sc.srv.refused.refuse(log, "tcpfab: closing unauthenticated connection", sc.remote, err)
			return
		}
	}
	fr := newFrameReader(sc.c)
	for {
		h, body, err := fr.next()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				log.Debug("tcpfab: connection ended", zap.String("remote", sc.remote), zap.Uint16("node", uint16(sc.node)))
			} else {
				log.Warn("tcpfab: closing connection", zap.String("remote", sc.remote),
					zap.Uint16("node", uint16(sc.node)), zap.Error(err))
			}
			return
		}
		sc.handle(h, body)
		switch {
		case sc.s.queued() > maxBacklog:
			err = sc.s.drain()
		case !fr.buffered():
			err = sc.s.flush()
		}
		if err != nil {
			log.Debug("tcpfab: write failed", zap.String("remote", sc.remote), zap.Error(err))
			return
		}
	}
}

// handle answers one well-framed request. Whatever is wrong with it becomes
// an error reply; the connection goes on.
func (sc *sconn) handle(h header, body []byte) {
	host := sc.srv.host
	if !sc.joined && h.Type != tJoin {
		if h.Type == tProbeReply {
			return
		}
		sc.replyErr(h.ID, fmt.Errorf("%w: frame type %#02x before join", rdma.ErrBadRequest, h.Type))
		return
	}
	switch h.Type {
	case tVerb, tBatch:
		sc.verbs(h, body)
	case tJoin:
		if sc.joined {
			sc.replyErr(h.ID, fmt.Errorf("%w: already joined as node %d", rdma.ErrBadRequest, sc.node))
			return
		}
		req, err := decodeJoinRequest(body)
		if err != nil {
			sc.replyErr(h.ID, err)
			return
		}
		req.From = joinSource(sc.c.RemoteAddr())
		rep, err := host.Join(req)
		if err != nil {
			sc.replyErr(h.ID, err)
			return
		}
		sc.joined, sc.node = true, rep.Node
		sc.srv.mu.Lock()
		sc.srv.byNode[rep.Node] = sc
		sc.srv.mu.Unlock()
		sc.reply(tJoinReply, h.ID, func(b []byte) []byte { return appendJoinReply(b, rep) })
	case tLeave:
		sc.detachAll()
		host.Leave(sc.node)
		sc.srv.mu.Lock()
		if sc.srv.byNode[sc.node] == sc {
			delete(sc.srv.byNode, sc.node)
		}
		sc.srv.mu.Unlock()
		sc.reply(tLeaveReply, h.ID, nil)
	case tPeers:
		ps := host.Peers()
		sc.reply(tPeersReply, h.ID, func(b []byte) []byte { return appendPeers(b, ps) })
	case tRecover:
		req, err := decodeRecoverRequest(body)
		if err != nil {
			sc.replyErr(h.ID, err)
			return
		}
		if err := host.Admit(sc.node); err != nil {
			sc.replyErr(h.ID, err)
			return
		}
		host.Counters().In(rdma.VerbControl)
		// Recovery probes members, possibly this one over this very
		// connection, so it must not hold up the reader.
		sc.calls.Add(1)
		go func() {
			defer sc.calls.Done()
			rep, err := host.Recover(sc.ctx, req)
			if err != nil {
				sc.replyErr(h.ID, err)
			} else {
				sc.reply(tRecoverReply, h.ID, func(b []byte) []byte { return appendRecoverReply(b, rep) })
			}
			_ = sc.s.flush()
		}()
	case tRange:
		req, err := decodeRangeRequest(body)
		if err != nil {
			sc.replyErr(h.ID, err)
			return
		}
		rh, ok := host.(rdma.RangeHost)
		if !ok {
			sc.replyErr(h.ID, fmt.Errorf("%w: this memory node serves no range locks", rdma.ErrBadRequest))
			return
		}
		host.Counters().In(rdma.VerbControl)
		// Quick: the pool's bookkeeping under its lock, never a probe.
		rep, err := rh.Range(sc.ctx, sc.node, req)
		if err != nil {
			sc.replyErr(h.ID, err)
			return
		}
		sc.reply(tRangeReply, h.ID, func(b []byte) []byte { return appendRangeReply(b, rep) })
	case tAttach:
		sc.srv.mu.Lock()
		fn := sc.srv.attach
		sc.srv.mu.Unlock()
		if fn == nil {
			sc.replyErr(h.ID, fmt.Errorf("%w: this memory node serves no other fabric (attach)", rdma.ErrBadRequest))
			return
		}
		if err := host.Admit(sc.node); err != nil {
			sc.replyErr(h.ID, err)
			return
		}
		// Setting up queue pairs takes the device's time; the reader goes on.
		req := append([]byte(nil), body...)
		sc.calls.Add(1)
		go func() {
			defer sc.calls.Done()
			rep, detach, err := fn(sc.ctx, sc.node, joinSource(sc.c.RemoteAddr()), req)
			if err == nil && detach != nil {
				sc.dmu.Lock()
				if sc.leaving {
					err = fmt.Errorf("%w: node %d left during attach", rdma.ErrUnreachable, sc.node)
				} else {
					sc.detach = append(sc.detach, detach)
					detach = nil
				}
				sc.dmu.Unlock()
				if detach != nil {
					detach()
				}
			}
			if err != nil {
				sc.replyErr(h.ID, err)
			} else {
				sc.reply(tAttachReply, h.ID, func(b []byte) []byte { return append(b, rep...) })
			}
			_ = sc.s.flush()
		}()
	case tProbeReply:
		d := newDecoder(body)
		hold := rdma.Hold(d.U8())
		if d.Done(trailing) != nil || hold > rdma.HoldActive {
			hold = rdma.HoldActive // the safe answer
		}
		sc.pmu.Lock()
		ch := sc.probes[h.ID]
		sc.pmu.Unlock()
		if ch != nil {
			select {
			case ch <- hold:
			default:
			}
		}
	default:
		sc.replyErr(h.ID, fmt.Errorf("%w: unknown frame type %#02x", rdma.ErrBadRequest, h.Type))
	}
}

// joinSource names the host a member connects from, for the memory node's
// per-host bound on node IDs: its IP address, or for IPv6 its /64, which
// is what one host is usually given (it could otherwise pick a new
// address for every join).
func joinSource(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		return ip4.String()
	}
	return (&net.IPNet{IP: ta.IP.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}).String()
}

// verbs executes a tVerb or tBatch frame and queues its reply. Counting
// follows memfab: nothing for a node that is not admitted; one batch per
// frame; each verb on a registered region (a lone verb on an unknown region
// counts nothing at all).
func (sc *sconn) verbs(h header, body []byte) {
	host := sc.srv.host
	n := int(h.Count)
	if h.Type == tVerb && n != 1 {
		sc.replyErr(h.ID, fmt.Errorf("%w: verb frame with %d verbs", rdma.ErrBadRequest, n))
		return
	}
	if err := host.Admit(sc.node); err != nil {
		sc.replyErr(h.ID, err)
		return
	}
	if n*minOpSize > len(body) {
		// Checked before sizing the scratch space by a count nobody
		// vouched for.
		sc.replyErr(h.ID, fmt.Errorf("%w: %d verbs in %d bytes", rdma.ErrBadRequest, n, len(body)))
		return
	}
	if cap(sc.ops) < n {
		sc.ops = make([]wireOp, n)
	}
	ops := sc.ops[:n]
	d := newDecoder(body)
	reserve := 0
	for i := range ops {
		decodeOp(&d, &ops[i])
		reserve += opReplyReserve(ops[i].Verb, ops[i].Wide, ops[i].readLen)
	}
	if err := d.Done(trailing); err != nil {
		sc.replyErr(h.ID, err)
		return
	}
	if reserve > MaxFrame {
		sc.replyErr(h.ID, fmt.Errorf("%w: reply of %d bytes would exceed the frame limit", rdma.ErrBadRequest, reserve))
		return
	}
	budget := MaxFrame - reserve // for error texts
	ctrs := host.Counters()
	if h.Type == tBatch {
		ctrs.In(rdma.VerbBatch)
	}
	b, err := sc.s.lock()
	if err != nil {
		return
	}
	b, at := beginFrame(b, h.Type|replyBit, uint16(n), h.ID)
	for i := range ops {
		op := &ops[i]
		m := host.Region(op.Addr.Region)
		if m == nil {
			op.Err = fmt.Errorf("%w: %d", rdma.ErrUnknownRegion, op.Addr.Region)
		} else {
			ctrs.In(op.Verb)
			if h.Type == tVerb {
				ctrs.In(rdma.VerbBatch)
			}
			if op.Verb == rdma.VerbRead {
				// Read straight into the reply.
				b = append(b, statusOK)
				start := len(b)
				b = slices.Grow(b, op.readLen)[:start+op.readLen]
				op.Buf = b[start:]
				if m.Exec(&op.Op) == nil {
					continue
				}
				b = b[:start-1]
			} else {
				m.Exec(&op.Op)
			}
		}
		before := len(b)
		b = appendOpResult(b, &op.Op, budget)
		if op.Err != nil {
			budget -= len(b) - before - errReserve
		}
		op.Buf = nil
	}
	sc.s.unlock(endFrame(b, at))
}

// reply queues a frame whose body enc appends; the reader's flush sends it.
func (sc *sconn) reply(typ uint8, id uint32, enc func([]byte) []byte) {
	b, err := sc.s.lock()
	if err != nil {
		return
	}
	b, at := beginFrame(b, typ, 0, id)
	if enc != nil {
		b = enc(b)
	}
	if size := len(b) - at - headerSize; size > MaxFrame {
		// The far end would take it for a broken stream.
		b, at = beginFrame(b[:at], tError, 0, id)
		b = appendError(b, fmt.Errorf("%w: reply of %d bytes exceeds the frame limit", rdma.ErrUnavailable, size), 1024)
	}
	sc.s.unlock(endFrame(b, at))
}

func (sc *sconn) replyErr(id uint32, err error) {
	sc.reply(tError, id, func(b []byte) []byte { return appendError(b, err, 1024) })
}
