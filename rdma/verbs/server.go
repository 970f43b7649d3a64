//go:build verbs

package verbs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/tcpfab"
	"github.com/shiftlock/shiftlock-proxy/rdma/verbs/ibv"
)

const (
	serverCQE   = 32768
	perMemberCQ = 3 // CQ entries per credit: a receive and up to two replies
)

// Server is a memory node's side of the verbs fabric: its regions on an
// RDMA device, one RC queue pair per member, and the CPU that executes the
// verbs on CPU regions (see Plan).
//
//	vs, err := verbs.NewServer(cfg)     // opens the device
//	mcfg.Alloc = vs.Alloc               // regions in registrable memory
//	host := memnode.New(mcfg)
//	ts := tcpfab.NewServer(vs.Host(host), log)
//	err = vs.Serve(host, ts)            // registers, answers ATTACH
//	go ts.Serve(ln)
type Server struct {
	cfg  ServerConfig
	log  *zap.Logger
	dev  *device
	mode LockTableMode

	amu      sync.Mutex
	allocs   map[rdma.RegionID][]byte
	allocErr error

	host rdma.Host
	plan []RegionMap
	mrs  []*ibv.MR

	mu      sync.Mutex
	members map[*member]struct{}
	closed  bool

	// Used by the poller only.
	req      Request
	readLens []int
	scratch  []byte

	stats serverCounters
	stop  chan struct{}
	wg    sync.WaitGroup
}

type serverCounters struct {
	cpuRequests, cpuOps, refused, revoked, attached atomic.Uint64
}

// ServerStats count the memory node's side.
type ServerStats struct {
	// CPURequests were executed for members, carrying CPUOps verbs.
	CPURequests, CPUOps uint64
	// Refused requests were failed as a whole (not admitted, malformed).
	Refused uint64
	// Revoked queue pairs were taken to the error state because their
	// member was no longer admitted.
	Revoked uint64
	// Attached counts queue pairs set up for members.
	Attached uint64
}

// Stats reads the counters.
func (s *Server) Stats() ServerStats {
	c := &s.stats
	return ServerStats{c.cpuRequests.Load(), c.cpuOps.Load(), c.refused.Load(), c.revoked.Load(), c.attached.Load()}
}

// NewServer opens the device. Pass Alloc to the memory node's config
// before creating it, then Serve.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Credits <= 0 {
		cfg.Credits = 32
	}
	if cfg.RevokeEvery <= 0 {
		cfg.RevokeEvery = 10 * time.Millisecond
	}
	if cfg.RevokeGrace <= 0 {
		cfg.RevokeGrace = time.Second
	}
	dev, err := openDevice(cfg.DeviceConfig, serverCQE, cfg.Logger)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, dev: dev, mode: cfg.LockTable, allocs: map[rdma.RegionID][]byte{},
		members: map[*member]struct{}{}, scratch: make([]byte, MsgMax), stop: make(chan struct{})}
	if s.mode == LockTableAuto {
		// No extended atomics are implemented (LockTableAuto): the lock
		// table goes through the CPU.
		s.mode = LockTableCPU
	}
	if s.mode == LockTableOneSided {
		s.cfg.RevokeGrace = 0
	}
	caps := dev.dev.Caps()
	s.log.Info("verbs device", zap.String("device", caps.Name), zap.String("driver", caps.Driver),
		zap.Stringer("atomic_cap", caps.Atomic), zap.Int("mtu", caps.MTU), zap.Int("gid_index", caps.GIDIndex),
		zap.Bool("rxe", caps.IsRXE()), zap.Stringer("lock_table", s.mode))
	return s, nil
}

// Caps is what the device reports.
func (s *Server) Caps() ibv.Caps { return s.dev.dev.Caps() }

// Mode is the lock-table mode in force.
func (s *Server) Mode() LockTableMode { return s.mode }

// Alloc is a memnode.Config.Alloc: every region in anonymous memory that
// the device can be given.
func (s *Server) Alloc(id rdma.RegionID, size uint64) []uint64 {
	b, err := ibv.Mmap(int(size))
	s.amu.Lock()
	defer s.amu.Unlock()
	if err != nil {
		// Serve reports it; the memory node gets memory it can run on.
		if s.allocErr == nil {
			s.allocErr = fmt.Errorf("verbs: region %d: %w", id, err)
		}
		return make([]uint64, size/8)
	}
	s.allocs[id] = b
	return ibv.Words(b)
}

// Host wraps the memory node for its tcpfab server, which serves the
// control path and any tcpfab member: a region whose words take one-sided
// atomics is kept from the memory node's CPU there (a CPU atomic is not
// atomic with the device's), and so is recovery, whose reset is one.
func (s *Server) Host(h rdma.Host) rdma.Host { return guardHost{h, s} }

type guardHost struct {
	rdma.Host
	s *Server
}

func (g guardHost) Region(id rdma.RegionID) *rdma.Memory {
	if g.s.atomicOneSided(id) {
		return nil
	}
	return g.Host.Region(id)
}

func (g guardHost) Recover(ctx context.Context, req rdma.RecoverRequest) (rdma.RecoverReply, error) {
	if g.s.atomicOneSided(rdma.RegionLocks) {
		return rdma.RecoverReply{}, fmt.Errorf("%w: lock table mode one-sided: recovery resets a 16-byte entry with the memory node's CPU, which the device's atomics are not atomic with", rdma.ErrBadRequest)
	}
	return g.Host.Recover(ctx, req)
}

// Range serves range-lock names (rdma.RangeHost) when the memory node
// does. The wrapper must say so itself: tcpfab finds a RangeHost by a type
// assertion, which the embedded rdma.Host alone would fail, and a memnode
// on -fabric verbs then refused every LOCK.RANGE bind as serving no range
// locks. The trees need nothing more of this fabric: their region is CPU
// (Plan), and a bind, unbind or repair is control-path traffic on the
// member's TCP control connection, as on tcpfab.
func (g guardHost) Range(ctx context.Context, n rdma.NodeID, req rdma.RangeRequest) (rdma.RangeReply, error) {
	rh, ok := g.Host.(rdma.RangeHost)
	if !ok {
		return rdma.RangeReply{}, fmt.Errorf("%w: this memory node serves no range locks", rdma.ErrBadRequest)
	}
	return rh.Range(ctx, n, req)
}

var _ rdma.RangeHost = guardHost{}

func (s *Server) atomicOneSided(id rdma.RegionID) bool {
	return id == rdma.RegionLocks && s.mode == LockTableOneSided
}

// Serve registers host's one-sided regions with the device and answers
// members' ATTACH requests on ts, until Close.
func (s *Server) Serve(host rdma.Host, ts *tcpfab.Server) error {
	s.amu.Lock()
	err := s.allocErr
	s.amu.Unlock()
	if err != nil {
		return err
	}
	s.host = host
	var infos []rdma.RegionInfo
	for _, id := range []rdma.RegionID{rdma.RegionLocks, rdma.RegionEras, rdma.RegionNodes, rdma.RegionRanges} {
		if m := host.Region(id); m != nil {
			infos = append(infos, m.Info())
		}
	}
	s.plan = Plan(s.mode, infos)
	for i := range s.plan {
		m := &s.plan[i]
		if m.Mech != OneSided {
			continue
		}
		mem := s.allocs[m.ID]
		if mem == nil {
			return fmt.Errorf("verbs: region %d was not allocated by Server.Alloc (set memnode Config.Alloc)", m.ID)
		}
		access := ibv.Access(0)
		if m.Rights&RightRead != 0 {
			access |= ibv.AccessRemoteRead
		}
		if m.Rights&RightWrite != 0 {
			access |= ibv.AccessRemoteWrite | ibv.AccessLocalWrite
		}
		if m.Rights&RightAtomic != 0 {
			access |= ibv.AccessRemoteAtomic | ibv.AccessLocalWrite
		}
		mr, err := s.dev.dev.Register(mem, access)
		if err != nil {
			return fmt.Errorf("verbs: region %d: %w", m.ID, err)
		}
		s.mrs = append(s.mrs, mr)
		m.Addr, m.RKey = uint64(mr.Addr), mr.RKey
		s.log.Info("verbs region", zap.Uint16("region", uint16(m.ID)), zap.Stringer("mechanism", m.Mech),
			zap.Uint8("rights", m.Rights), zap.Uint64("bytes", m.Size))
	}
	for _, m := range s.plan {
		if m.Mech == CPU {
			s.log.Info("verbs region", zap.Uint16("region", uint16(m.ID)), zap.Stringer("mechanism", m.Mech), zap.Uint64("bytes", m.Size))
		}
	}
	s.dev.start()
	ts.OnAttach(s.attach)
	s.wg.Add(1)
	go s.revoker()
	return nil
}

// Close drops every member's queue pair and releases the device. The
// regions' memory stays mapped: the memory node may still read it.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	ms := make([]*member, 0, len(s.members))
	for m := range s.members {
		ms = append(ms, m)
	}
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
	s.dev.halt()
	for _, m := range ms {
		s.drop(m)
	}
	for _, mr := range s.mrs {
		_ = mr.Deregister()
	}
	s.dev.close()
}

// member is the memory node's queue pair to one member, and its buffers:
// Credits receive buffers for requests, twice as many for replies.
type member struct {
	s    *Server
	node rdma.NodeID
	id   uint32
	psn  uint32

	mu        sync.RWMutex // read-held while used; write-held to destroy
	destroyed bool
	qpMem
	revoked  atomic.Bool
	outSince time.Time // revoker only: when it first saw the member not admitted

	// Used by the poller only.
	replyFree []int
	waiting   []recvd
}

type recvd struct{ idx, n int }

func (s *Server) attach(ctx context.Context, node rdma.NodeID, from string, body []byte) ([]byte, func(), error) {
	req, err := DecodeAttachRequest(body)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	full := len(s.members) >= serverCQE/(perMemberCQ*s.cfg.Credits)
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, nil, fmt.Errorf("%w: memory node closing", rdma.ErrUnavailable)
	}
	if full {
		return nil, nil, fmt.Errorf("%w: the memory node's completion queue has room for no more queue pairs", rdma.ErrUnavailable)
	}
	m, err := s.newMember(node)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", rdma.ErrUnavailable, err)
	}
	access := ibv.AccessRemoteRead | ibv.AccessRemoteWrite | ibv.AccessRemoteAtomic
	if err := m.qp.Connect(req.QP.QPN, req.QP.PSN, m.psn, req.QP.GID, connParams(access)); err != nil {
		s.drop(m)
		return nil, nil, fmt.Errorf("%w: %v", rdma.ErrUnavailable, err)
	}
	if err := m.postRecvs(); err != nil {
		s.drop(m)
		return nil, nil, fmt.Errorf("%w: %v", rdma.ErrUnavailable, err)
	}
	caps := s.dev.dev.Caps()
	rep := AttachReply{QP: QPInfo{QPN: m.qp.Num, PSN: m.psn, GID: caps.GID}, Credits: uint16(s.cfg.Credits),
		Mode: s.mode, Device: caps.Name + " (" + caps.Driver + ")", Regions: s.plan}
	s.stats.attached.Add(1)
	s.log.Debug("verbs member attached", zap.Uint16("node", uint16(node)), zap.String("from", from), zap.Uint32("qpn", m.qp.Num))
	return rep.Encode(nil), func() { s.drop(m) }, nil
}

func (s *Server) newMember(node rdma.NodeID) (*member, error) {
	k := s.cfg.Credits
	m := &member{s: s, node: node, psn: rand.Uint32() & (1<<24 - 1)}
	var err error
	if m.qpMem, err = s.dev.newQPMem(3*k*MsgMax, 2*k+8, k); err != nil {
		return nil, err
	}
	for i := 0; i < 2*k; i++ {
		m.replyFree = append(m.replyFree, k+i)
	}
	m.id = s.dev.register(m)
	s.mu.Lock()
	s.members[m] = struct{}{}
	s.mu.Unlock()
	return m, nil
}

// postRecvs posts every request buffer: once connected (a queue pair in
// RESET takes no receive), before the member learns it may send.
func (m *member) postRecvs() error {
	for i := 0; i < m.s.cfg.Credits; i++ {
		if err := m.postRecv(i); err != nil {
			return err
		}
	}
	return nil
}

// drop destroys a member's queue pair and buffers, once.
func (s *Server) drop(m *member) {
	// First no more deliveries (the poller holds m.mu read-locked while
	// it delivers, so this comes before locking it).
	s.dev.unregister(m.id)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.destroyed {
		return
	}
	m.destroyed = true
	s.mu.Lock()
	delete(s.members, m)
	s.mu.Unlock()
	destroyQPMem(m.qpMem)
}

func (m *member) buf(i int) []byte { return m.mem[i*MsgMax : (i+1)*MsgMax : (i+1)*MsgMax] }

func (m *member) postRecv(i int) error {
	return m.qp.PostRecv(wrID(kSrvRecv, m.id, i), m.mr.Addr+uintptr(i*MsgMax), MsgMax, m.mr.LKey)
}

// revoker takes the queue pairs of members the memory node no longer
// admits to the error state: their one-sided verbs stop reaching memory,
// as tcpfab's and memfab's Admit check stops theirs.
func (s *Server) revoker() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.RevokeEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		s.mu.Lock()
		var ms []*member
		for m := range s.members {
			if m.revoked.Load() || s.host.Admit(m.node) == nil {
				continue
			}
			if m.outSince.IsZero() {
				m.outSince = now
			}
			if now.Sub(m.outSince) >= s.cfg.RevokeGrace {
				ms = append(ms, m)
			}
		}
		s.mu.Unlock()
		for _, m := range ms {
			m.mu.RLock()
			if !m.destroyed && !m.revoked.Swap(true) {
				if err := m.qp.Fail(); err != nil {
					s.log.Warn("verbs: revoking a queue pair failed", zap.Uint16("node", uint16(m.node)), zap.Error(err))
				}
				s.stats.revoked.Add(1)
				s.log.Info("verbs: queue pair revoked", zap.Uint16("node", uint16(m.node)))
			}
			m.mu.RUnlock()
		}
	}
}

func (m *member) complete(kind uint8, idx int, wc *ibv.WC) {
	s := m.s
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.destroyed {
		return
	}
	if wc.Status != ibv.StatusSuccess {
		if wc.Status != ibv.StatusFlushErr && !m.revoked.Load() {
			s.log.Info("verbs: a member's queue pair failed", zap.Uint16("node", uint16(m.node)), zap.Error(statusErr(wc)))
		}
		return // the queue pair is down; the member's control connection ending drops it
	}
	switch kind {
	case kSrvRecv:
		m.serve(recvd{idx, int(wc.ByteLen)})
	case kSrvSend:
		m.replyFree = append(m.replyFree, idx)
		if len(m.waiting) > 0 {
			r := m.waiting[0]
			m.waiting = m.waiting[1:]
			m.serve(r)
		}
	}
}

// serve executes one CPU request and posts its reply. The request's
// buffer is reposted only after its verbs ran: a Write's data is in it.
func (m *member) serve(r recvd) {
	s := m.s
	if len(m.replyFree) == 0 {
		m.waiting = append(m.waiting, r)
		return
	}
	ri := m.replyFree[len(m.replyFree)-1]
	m.replyFree = m.replyFree[:len(m.replyFree)-1]
	rb := m.buf(ri)
	out := s.execute(m.node, m.buf(r.idx)[:r.n], rb[:0])
	if err := m.postRecv(r.idx); err != nil {
		s.log.Warn("verbs: reposting a receive buffer failed", zap.Uint16("node", uint16(m.node)), zap.Error(err))
		return
	}
	err := m.qp.PostSend([]ibv.WR{{ID: wrID(kSrvSend, m.id, ri), Opcode: ibv.OpSend, Flags: ibv.SendSignaled,
		LocalAddr: uint64(m.mr.Addr) + uint64(ri*MsgMax), LocalLen: uint32(len(out)), LKey: m.mr.LKey}})
	if err != nil {
		m.replyFree = append(m.replyFree, ri)
		s.log.Warn("verbs: posting a reply failed", zap.Uint16("node", uint16(m.node)), zap.Error(err))
	}
}

// execute runs a CPU request from node and encodes its reply into out, a
// reply buffer (MsgMax bytes of capacity). Counting follows tcpfab: one
// batch per admitted request, and each verb on a registered region.
func (s *Server) execute(node rdma.NodeID, in, out []byte) []byte {
	host := s.host
	req := &s.req
	fail := func(id uint32, err error) []byte {
		s.stats.refused.Add(1)
		return appendRequestError(out, id, err)
	}
	if err := DecodeRequest(in, req, &s.readLens); err != nil {
		return fail(req.ID, err)
	}
	if err := host.Admit(node); err != nil {
		return fail(req.ID, err)
	}
	reserve := msgHeader
	for i := range req.Ops {
		op := &req.Ops[i]
		n := 1
		switch op.Verb {
		case rdma.VerbRead:
			n += s.readLens[i]
		case rdma.VerbWrite:
		default:
			n += operandSize(op.Wide)
		}
		reserve += max(n, 1+errReserve)
	}
	if reserve > cap(out) {
		return fail(req.ID, fmt.Errorf("%w: a reply of %d bytes would not fit a %d-byte buffer", rdma.ErrBadRequest, reserve, cap(out)))
	}
	ctrs := host.Counters()
	ctrs.In(rdma.VerbBatch)
	s.stats.cpuRequests.Add(1)
	s.stats.cpuOps.Add(uint64(len(req.Ops)))
	start := &out[:1][0]
	out = appendReplyHeader(out, req.ID, len(req.Ops))
	for i := range req.Ops {
		op := &req.Ops[i]
		mech, mem := s.region(op.Addr.Region)
		switch {
		case mem == nil:
			op.Err = fmt.Errorf("%w: %d", rdma.ErrUnknownRegion, op.Addr.Region)
		case mech != CPU:
			ctrs.In(op.Verb)
			op.Err = fmt.Errorf("%w: region %d is one-sided: every access to it goes through the device, never the memory node's CPU", rdma.ErrBadRequest, op.Addr.Region)
		default:
			ctrs.In(op.Verb)
			if op.Verb == rdma.VerbRead {
				op.Buf = s.scratch[:s.readLens[i]]
			}
			mem.Exec(op)
		}
		out = appendResult(out, op)
		op.Buf = nil
	}
	if &out[0] != start {
		panic("verbs: a reply outgrew its buffer") // reserve is checked above
	}
	return out
}

func (s *Server) region(id rdma.RegionID) (Mechanism, *rdma.Memory) {
	for i := range s.plan {
		if s.plan[i].ID == id {
			return s.plan[i].Mech, s.host.Region(id)
		}
	}
	return 0, nil
}
