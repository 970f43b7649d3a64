//go:build verbs

package verbs

import (
	"context"
	"encoding/binary"
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

// Sizes of an endpoint's buffers.
const (
	numSlots  = 64 // verbs runs in flight
	cpuBufs   = 32 // receive buffers for CPU replies: CPU requests in flight
	maxChain  = 32 // work requests per doorbell
	maxSendWR = numSlots*maxChain + 64
	clientCQE = 8192
)

// Endpoint is a member's attachment to a memory node over libibverbs. It
// implements rdma.Endpoint:
//
//   - verbs on one-sided regions (the node table, the era counters, and the
//     lock table in LockTableOneSided) are RDMA READ, WRITE, CAS and FAA
//     work requests on one RC queue pair to the memory node, a batch's run
//     of them posted as one chain (one doorbell) with only its last work
//     request signalled;
//   - verbs on CPU regions (the lock table and range trees, unless
//     one-sided) travel in one SEND per run to the memory node's CPU,
//     which executes them in order through rdma.Memory and answers with
//     one SEND: one round trip, as a one-sided atomic is;
//   - Sends to other members are SENDs on RC queue pairs to them, each
//     acknowledged with a SEND back that carries the receive handler's
//     answer, with the receive buffers reposted;
//   - set-up and the control path use a tcpfab endpoint: joining, the
//     address book, recovery and probes, the queue pair exchange with the
//     memory node (ATTACH) and with other members (handshakes on
//     HandshakeTarget), all behind the fabric secret.
//
// Like tcpfab's, it never reconnects: once its queue pair or control
// connection to the memory node fails, every verb fails with ErrUnreachable
// and the owner rejoins with a new Dial.
type Endpoint struct {
	ctl        *tcpfab.Endpoint
	dev        *device
	releaseDev func()
	log        *zap.Logger
	node       rdma.NodeID
	layout     rdma.Layout
	regions    map[rdma.RegionID]*RegionMap
	mode       LockTableMode
	timeout    time.Duration

	qpMem        // the queue pair to the memory node, and the slots' and reply buffers' memory
	cid   uint32 // the memory node connection's id in dev

	slots   []*slot
	free    chan *slot
	credits chan struct{}
	recvOff int // offset in mem of the CPU reply buffers

	ctrs rdma.Counters
	wire wireCounters
	recv atomic.Pointer[func(rdma.Message) error]

	peers peers

	closed     atomic.Bool
	brokenOnce sync.Once
	broken     chan struct{}
	brokenErr  error
	stop       chan struct{}
	wg         sync.WaitGroup
}

var _ rdma.Endpoint = (*Endpoint)(nil)

// slot is the local memory and completion state of one run of verbs in
// flight: one chain of one-sided work requests, or one CPU request.
type slot struct {
	idx  int
	buf  []byte // MsgMax bytes of the registered region
	addr uint64
	gen  uint16

	mu        sync.Mutex
	expect    int   // completions still to come
	err       error // the first failed completion's
	reply     int   // receive buffer holding the CPU reply, or -1
	replyLen  int
	cpu       bool // holds a credit
	abandoned bool
	done      chan struct{}
}

// Dial joins the memory node at addr over its TCP control port and
// connects a queue pair to it on the local RDMA device.
func Dial(ctx context.Context, addr string, cfg Config) (*Endpoint, error) {
	log := cfg.Control.Logger
	if log == nil {
		log = zap.NewNop()
		cfg.Control.Logger = log
	}
	timeout := cfg.Control.Timeout
	if timeout == 0 {
		timeout = tcpfab.DefaultTimeout
	}
	dev, release, err := acquireDevice(cfg.DeviceConfig, log)
	if err != nil {
		return nil, err
	}
	e := &Endpoint{dev: dev, releaseDev: release, log: log, timeout: timeout, regions: map[rdma.RegionID]*RegionMap{},
		broken: make(chan struct{}), stop: make(chan struct{})}
	e.peers.init(e)
	ok := false
	defer func() {
		if !ok {
			e.teardown()
		}
	}()
	if e.qpMem, err = dev.newQPMem(numSlots*MsgMax+cpuBufs*MsgMax, maxSendWR, cpuBufs); err != nil {
		return nil, fmt.Errorf("verbs: %w", err)
	}
	e.slots = make([]*slot, numSlots)
	e.free = make(chan *slot, numSlots)
	for i := range e.slots {
		s := &slot{idx: i, buf: e.mem[i*MsgMax : (i+1)*MsgMax : (i+1)*MsgMax], reply: -1, done: make(chan struct{}, 1)}
		s.addr = uint64(e.mr.Addr) + uint64(i*MsgMax)
		e.slots[i] = s
		e.free <- s
	}
	e.recvOff = numSlots * MsgMax

	if e.ctl, err = tcpfab.Dial(ctx, addr, cfg.Control); err != nil {
		return nil, err
	}
	e.node, e.layout = e.ctl.Node(), e.ctl.Layout()
	psn := rand.Uint32() & (1<<24 - 1)
	caps := dev.dev.Caps()
	rep, err := e.ctl.Attach(ctx, AttachRequest{QP: QPInfo{QPN: e.qp.Num, PSN: psn, GID: caps.GID}}.Encode(nil))
	if err != nil {
		return nil, fmt.Errorf("verbs: memory node %s: %w", addr, err)
	}
	ar, err := DecodeAttachReply(rep)
	if err != nil {
		return nil, fmt.Errorf("%w: memory node %s: %v", rdma.ErrUnreachable, addr, err)
	}
	e.mode = ar.Mode
	for i := range ar.Regions {
		m := ar.Regions[i]
		e.regions[m.ID] = &m
	}
	credits := min(int(ar.Credits), cpuBufs)
	e.credits = make(chan struct{}, credits)
	for i := 0; i < credits; i++ {
		e.credits <- struct{}{}
	}
	e.cid = dev.register(mnSink{e})
	if err := e.qp.Connect(ar.QP.QPN, ar.QP.PSN, psn, ar.QP.GID, connParams(0)); err != nil {
		return nil, fmt.Errorf("verbs: memory node %s: %w", addr, err)
	}
	// Replies come only to requests, which come after this.
	for i := 0; i < cpuBufs; i++ {
		if err := e.postRecv(i); err != nil {
			return nil, fmt.Errorf("verbs: %w", err)
		}
	}
	e.ctl.Bind(e.onControl)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		select {
		case <-e.ctl.Broken():
			e.fail(fmt.Errorf("%w: the control connection to memory node %s failed", rdma.ErrUnreachable, addr))
		case <-e.stop:
		}
	}()
	log.Info("verbs endpoint attached", zap.String("memnode", addr), zap.String("device", caps.Name),
		zap.Uint16("node", uint16(e.node)), zap.Uint32("qpn", e.qp.Num), zap.String("memnode_device", ar.Device),
		zap.Stringer("lock_table", ar.Mode), zap.Int("cpu_credits", credits))
	ok = true
	return e, nil
}

func (e *Endpoint) Node() rdma.NodeID        { return e.node }
func (e *Endpoint) Layout() rdma.Layout      { return e.layout }
func (e *Endpoint) Counters() *rdma.Counters { return &e.ctrs }
func (e *Endpoint) Control() rdma.Control    { return e.ctl.Control() }

// Bind installs the receive handler of Sends to this member.
func (e *Endpoint) Bind(fn func(rdma.Message) error) { e.recv.Store(&fn) }

// BindProbe installs the handler of the memory node's probes, which come
// over the control connection.
func (e *Endpoint) BindProbe(fn func(uint64) rdma.Hold) { e.ctl.BindProbe(fn) }

// Mode is the memory node's lock-table mode.
func (e *Endpoint) Mode() LockTableMode { return e.mode }

// Mechanism is how region id is reached, and whether the memory node
// registered it.
func (e *Endpoint) Mechanism(id rdma.RegionID) (Mechanism, bool) {
	m := e.regions[id]
	if m == nil {
		return 0, false
	}
	return m.Mech, true
}

// Refused counts connections to the peer port that failed the secret.
func (e *Endpoint) Refused() uint64 { return e.ctl.Refused() }

// fail breaks the endpoint: every verb in flight and to come fails with err.
func (e *Endpoint) fail(err error) {
	e.brokenOnce.Do(func() {
		e.brokenErr = err
		close(e.broken)
		if !e.closed.Load() {
			e.log.Warn("verbs: connection to the memory node failed", zap.Error(err))
		}
	})
}

func (e *Endpoint) isBroken() error {
	select {
	case <-e.broken:
		return e.brokenErr
	default:
		return nil
	}
}

// Close leaves the memory node, tells the members it has queue pairs with,
// and releases the device. Later verbs return ErrClosed.
func (e *Endpoint) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	e.peers.close()
	e.fail(rdma.ErrClosed)
	if e.ctl != nil {
		_ = e.ctl.Close()
	}
	e.teardown()
	return nil
}

// Kill makes the endpoint vanish as a crashed process would, as far as the
// members it has queue pairs with can tell: no goodbye, its queue pairs
// just stop answering, so their Sends to it run out of transport retries.
// (It still leaves the memory node.) For tests of peer failure.
func (e *Endpoint) Kill() {
	if e.closed.Swap(true) {
		return
	}
	e.peers.mu.Lock()
	e.peers.closed = true
	e.peers.mu.Unlock()
	e.fail(rdma.ErrClosed)
	if e.ctl != nil {
		_ = e.ctl.Close()
	}
	e.teardown()
}

// teardown releases what Dial set up, in the order the device needs: no
// more deliveries, then queue pairs, then the memory they wrote, then the
// (shared) device.
func (e *Endpoint) teardown() {
	select {
	case <-e.stop:
	default:
		close(e.stop)
	}
	e.wg.Wait()
	if e.cid != 0 {
		e.dev.unregister(e.cid)
	}
	e.peers.destroyAll()
	destroyQPMem(e.qpMem)
	e.releaseDev()
}

func (e *Endpoint) check(ctx context.Context) error {
	if e.closed.Load() {
		return rdma.ErrClosed
	}
	if err := e.isBroken(); err != nil {
		return err
	}
	return ctx.Err()
}

func (e *Endpoint) postRecv(i int) error {
	off := e.recvOff + i*MsgMax
	return e.qp.PostRecv(wrID(kCPURecv, e.cid, i), e.mr.Addr+uintptr(off), MsgMax, e.mr.LKey)
}

func (e *Endpoint) recvBuf(i int) []byte {
	off := e.recvOff + i*MsgMax
	return e.mem[off : off+MsgMax]
}

// getSlot takes a free slot, waiting for one.
func (e *Endpoint) getSlot(ctx context.Context) (*slot, error) {
	select {
	case s := <-e.free:
		return s, nil
	default:
	}
	select {
	case s := <-e.free:
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-e.broken:
		return nil, e.brokenErr
	}
}

// arm readies s for a run that completes after n completions.
func (s *slot) arm(n int, cpu bool) {
	s.mu.Lock()
	s.gen++
	s.expect, s.err, s.reply, s.replyLen, s.cpu, s.abandoned = n, nil, -1, 0, cpu, false
	s.mu.Unlock()
	select {
	case <-s.done:
	default:
	}
}

// release returns s (and its credit and reply buffer) once the run's last
// completion is in and nobody waits for it.
func (e *Endpoint) release(s *slot) {
	s.mu.Lock()
	reply, cpu := s.reply, s.cpu
	s.reply, s.cpu = -1, false
	s.mu.Unlock()
	if reply >= 0 && e.isBroken() == nil {
		if err := e.postRecv(reply); err != nil {
			e.fail(fmt.Errorf("%w: reposting a receive buffer: %v", rdma.ErrUnreachable, err))
		}
	}
	if cpu {
		e.credits <- struct{}{}
	}
	e.free <- s
}

// wait waits for s's run to complete. On an error it abandons the slot,
// which the completions release once the device is done with its memory.
func (e *Endpoint) wait(ctx context.Context, s *slot) error {
	var timer <-chan time.Time
	if _, ok := ctx.Deadline(); !ok && e.timeout > 0 {
		t := time.NewTimer(e.timeout)
		defer t.Stop()
		timer = t.C
	}
	var err error
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-e.broken:
		err = e.brokenErr
	case <-timer:
		err = fmt.Errorf("%w: the memory node did not complete a verb in %v", rdma.ErrUnreachable, e.timeout)
	}
	s.mu.Lock()
	if s.expect == 0 {
		s.mu.Unlock()
		return nil // completed meanwhile: the result is good
	}
	s.abandoned = true
	s.mu.Unlock()
	return err
}

// run posts wrs, the run s is armed for, and waits for it. On nil the run
// completed without error and s is the caller's to read and release; on
// an error s is released, or abandoned to the completions still to come.
func (e *Endpoint) run(ctx context.Context, s *slot, wrs []ibv.WR) error {
	e.dev.kick()
	if err := e.qp.PostSend(wrs); err != nil {
		e.fail(fmt.Errorf("%w: %v", rdma.ErrUnreachable, err))
		e.release(s) // nothing to complete: the slot and its credit go back
		return e.brokenErr
	}
	if err := e.wait(ctx, s); err != nil {
		return err
	}
	if s.err != nil {
		err := s.err
		e.release(s)
		return err
	}
	return nil
}

// mnSink receives the completions of the queue pair to the memory node.
type mnSink struct{ e *Endpoint }

func (m mnSink) deviceFailed(err error) { m.e.fail(err) }

func (m mnSink) complete(kind uint8, idx int, wc *ibv.WC) {
	e := m.e
	if wc.Status != ibv.StatusSuccess {
		if wc.Status == ibv.StatusFlushErr && e.isBroken() != nil {
			// The queue pair is already down; the flush only returns
			// its work requests.
		} else {
			e.fail(fmt.Errorf("%w: %w", errBroken, statusErr(wc)))
		}
	}
	switch kind {
	case kOneSided, kCPUSend:
		if idx&lastFlag == 0 && kind == kOneSided {
			// An unsignalled work request completed in error; its
			// chain's last one will follow (flushed).
			s := e.slots[idx&indexMask]
			s.mu.Lock()
			if s.err == nil {
				s.err = statusErr(wc)
			}
			s.mu.Unlock()
			return
		}
		e.step(e.slots[idx&indexMask], wc, -1, 0)
	case kCPURecv:
		if wc.Status != ibv.StatusSuccess {
			return // flushed with the queue pair
		}
		buf := e.recvBuf(idx)[:wc.ByteLen]
		id, err := replyID(buf)
		if err != nil || int(id&0xffff) >= len(e.slots) {
			e.log.Warn("verbs: malformed reply from the memory node", zap.Error(err))
			_ = e.postRecv(idx)
			return
		}
		s := e.slots[id&0xffff]
		s.mu.Lock()
		stale := s.gen != uint16(id>>16) || !s.cpu || s.reply >= 0
		s.mu.Unlock()
		if stale {
			e.log.Warn("verbs: reply to no request in flight", zap.Uint32("id", id))
			_ = e.postRecv(idx)
			return
		}
		e.step(s, wc, idx, int(wc.ByteLen))
	}
}

// step counts one completion of s's run.
func (e *Endpoint) step(s *slot, wc *ibv.WC, reply, n int) {
	s.mu.Lock()
	if wc.Status != ibv.StatusSuccess && s.err == nil {
		s.err = statusErr(wc)
	}
	if reply >= 0 {
		s.reply, s.replyLen = reply, n
	}
	s.expect--
	last, abandoned := s.expect == 0, s.abandoned
	s.mu.Unlock()
	if !last {
		return
	}
	if abandoned {
		e.release(s)
		return
	}
	s.done <- struct{}{}
}

var allOnes = rdma.U128{Lo: ^uint64(0), Hi: ^uint64(0)}

func (e *Endpoint) one(ctx context.Context, op rdma.Op) (rdma.U128, error) {
	b := rdma.Batch{Ops: []rdma.Op{op}}
	if err := e.post(ctx, &b, false); err != nil {
		return rdma.U128{}, err
	}
	return b.Ops[0].Old, b.Ops[0].Err
}

func (e *Endpoint) Read(ctx context.Context, a rdma.Addr, p []byte) error {
	_, err := e.one(ctx, rdma.Op{Verb: rdma.VerbRead, Addr: a, Buf: p})
	return err
}

func (e *Endpoint) Write(ctx context.Context, a rdma.Addr, p []byte) error {
	_, err := e.one(ctx, rdma.Op{Verb: rdma.VerbWrite, Addr: a, Buf: p})
	return err
}

func (e *Endpoint) CAS(ctx context.Context, a rdma.Addr, cmp, swap uint64) (uint64, error) {
	old, err := e.one(ctx, rdma.Op{Verb: rdma.VerbCAS, Addr: a, Compare: rdma.U64(cmp), CompareMask: rdma.U64(allOnes.Lo), Value: rdma.U64(swap), Mask: rdma.U64(allOnes.Lo)})
	return old.Lo, err
}

func (e *Endpoint) FAA(ctx context.Context, a rdma.Addr, add uint64) (uint64, error) {
	old, err := e.one(ctx, rdma.Op{Verb: rdma.VerbFAA, Addr: a, Value: rdma.U64(add)})
	return old.Lo, err
}

func (e *Endpoint) MaskedCAS64(ctx context.Context, a rdma.Addr, cmp, cmpMask, swap, swapMask uint64) (uint64, error) {
	old, err := e.one(ctx, rdma.Op{Verb: rdma.VerbMaskedCAS, Addr: a, Compare: rdma.U64(cmp), CompareMask: rdma.U64(cmpMask), Value: rdma.U64(swap), Mask: rdma.U64(swapMask)})
	return old.Lo, err
}

func (e *Endpoint) MaskedFAA64(ctx context.Context, a rdma.Addr, add, boundary uint64) (uint64, error) {
	old, err := e.one(ctx, rdma.Op{Verb: rdma.VerbMaskedFAA, Addr: a, Value: rdma.U64(add), Mask: rdma.U64(boundary)})
	return old.Lo, err
}

func (e *Endpoint) MaskedCAS128(ctx context.Context, a rdma.Addr, cmp, cmpMask, swap, swapMask rdma.U128) (rdma.U128, error) {
	return e.one(ctx, rdma.Op{Verb: rdma.VerbMaskedCAS, Wide: true, Addr: a, Compare: cmp, CompareMask: cmpMask, Value: swap, Mask: swapMask})
}

func (e *Endpoint) MaskedFAA128(ctx context.Context, a rdma.Addr, add, boundary rdma.U128) (rdma.U128, error) {
	return e.one(ctx, rdma.Op{Verb: rdma.VerbMaskedFAA, Wide: true, Addr: a, Value: add, Mask: boundary})
}

// Post executes the batch in order. Consecutive verbs on one mechanism go
// together: a run on one-sided regions as one chain of work requests (one
// doorbell), a run on CPU regions as one request; a batch that mixes them
// takes one round trip per run, in order.
func (e *Endpoint) Post(ctx context.Context, b *rdma.Batch) error {
	return e.post(ctx, b, true)
}

func (e *Endpoint) post(ctx context.Context, b *rdma.Batch, batch bool) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	ops := b.Ops
	// Validate first, as rdma.Memory would, so that no bad verb reaches
	// the device; count as memfab does (a verb on a registered region
	// counts, whatever its fate).
	mechs := make([]int8, len(ops)) // -1: failed already
	for i := range ops {
		op := &ops[i]
		op.Err = nil
		m := e.regions[op.Addr.Region]
		if m == nil {
			op.Err = fmt.Errorf("%w: %d", rdma.ErrUnknownRegion, op.Addr.Region)
			mechs[i] = -1
			continue
		}
		if err := checkOp(op, m); err != nil {
			op.Err = err
			mechs[i] = -1
			continue
		}
		mechs[i] = int8(m.Mech)
	}
	for i := 0; i < len(ops); {
		if mechs[i] < 0 {
			i++
			continue
		}
		j := i + 1
		for j < len(ops) && (mechs[j] == mechs[i] || mechs[j] < 0) {
			j++
		}
		var err error
		if Mechanism(mechs[i]) == OneSided {
			err = e.runOneSided(ctx, ops[i:j], mechs[i:j])
		} else {
			err = e.runCPU(ctx, ops[i:j], mechs[i:j])
		}
		if err != nil {
			return err
		}
		i = j
	}
	if batch || len(ops) > 0 && e.regions[ops[0].Addr.Region] != nil {
		e.ctrs.Out(rdma.VerbBatch)
	}
	for i := range ops {
		if e.regions[ops[i].Addr.Region] != nil {
			e.ctrs.Out(ops[i].Verb)
		}
	}
	return nil
}

// wrsFor lists the one-sided work requests of op, with dst the local
// buffer at offset off of s. A Write goes as one work request per 8-byte
// word, in address order: RC executes a queue pair's work requests in
// order, while one WRITE's bytes may land in any order, and the node
// table's heartbeat (horizon, then sequence) relies on word order.
func wrsFor(op *rdma.Op, m *RegionMap, s *slot, off int, lkey uint32, out []ibv.WR) []ibv.WR {
	raddr := m.Addr + op.Addr.Offset
	switch op.Verb {
	case rdma.VerbRead:
		return append(out, ibv.WR{Opcode: ibv.OpRead, LocalAddr: s.addr + uint64(off), LocalLen: uint32(len(op.Buf)), LKey: lkey, RemoteAddr: raddr, RKey: m.RKey})
	case rdma.VerbWrite:
		copy(s.buf[off:], op.Buf)
		for w := 0; w < len(op.Buf); w += 8 {
			out = append(out, ibv.WR{Opcode: ibv.OpWrite, LocalAddr: s.addr + uint64(off+w), LocalLen: 8, LKey: lkey, RemoteAddr: raddr + uint64(w), RKey: m.RKey})
		}
		return out
	case rdma.VerbCAS:
		return append(out, ibv.WR{Opcode: ibv.OpCompareSwap, LocalAddr: s.addr + uint64(off), LocalLen: 8, LKey: lkey, RemoteAddr: raddr, RKey: m.RKey, CompareAdd: op.Compare.Lo, Swap: op.Value.Lo})
	case rdma.VerbFAA:
		return append(out, ibv.WR{Opcode: ibv.OpFetchAdd, LocalAddr: s.addr + uint64(off), LocalLen: 8, LKey: lkey, RemoteAddr: raddr, RKey: m.RKey, CompareAdd: op.Value.Lo})
	}
	return out
}

// localSize is the slot memory op needs.
func localSize(op *rdma.Op) int {
	switch op.Verb {
	case rdma.VerbRead, rdma.VerbWrite:
		return len(op.Buf)
	}
	return 8
}

func wrCount(op *rdma.Op) int {
	if op.Verb == rdma.VerbWrite {
		return max(len(op.Buf)/8, 1)
	}
	return 1
}

// runOneSided posts ops (valid ones where mechs[i] >= 0) as chains of work
// requests, each as big as a slot's memory and maxChain allow, and waits
// for each chain's last, signalled, work request.
func (e *Endpoint) runOneSided(ctx context.Context, ops []rdma.Op, mechs []int8) error {
	for i := 0; i < len(ops); {
		s, err := e.getSlot(ctx)
		if err != nil {
			return err
		}
		var wrs [maxChain * 2]ibv.WR
		chain := wrs[:0]
		type placed struct{ op, off int }
		var at [maxChain]placed
		nplaced, used, j := 0, 0, i
		for ; j < len(ops); j++ {
			if mechs[j] < 0 {
				continue
			}
			op := &ops[j]
			n := localSize(op)
			if n == 0 {
				continue // nothing to move
			}
			if nplaced > 0 && (used+n > MsgMax || len(chain)+wrCount(op) > maxChain || nplaced == maxChain) {
				break
			}
			if n > MsgMax || wrCount(op) > maxChain {
				op.Err = fmt.Errorf("%w: %d bytes in one verb (at most %d one-sided)", rdma.ErrBadRequest, n, min(MsgMax, maxChain*8))
				mechs[j] = -1
				continue
			}
			chain = wrsFor(op, e.regions[op.Addr.Region], s, used, e.mr.LKey, chain)
			at[nplaced] = placed{j, used}
			nplaced++
			used += (n + 7) &^ 7
		}
		if len(chain) == 0 {
			e.free <- s
			i = j
			continue
		}
		s.arm(1, false)
		for k := range chain {
			chain[k].ID = wrID(kOneSided, e.cid, s.idx)
		}
		last := &chain[len(chain)-1]
		last.ID |= lastFlag
		last.Flags |= ibv.SendSignaled
		e.wire.doorbells.Add(1)
		e.wire.roundTrips.Add(1)
		for k := range chain {
			e.wire.wrs[chain[k].Opcode&7].Add(1)
		}
		if err := e.run(ctx, s, chain); err != nil {
			return err
		}
		for k := 0; k < nplaced; k++ {
			op := &ops[at[k].op]
			src := s.buf[at[k].off:]
			switch op.Verb {
			case rdma.VerbRead:
				copy(op.Buf, src[:len(op.Buf)])
			case rdma.VerbCAS, rdma.VerbFAA:
				// The device writes the old value in host order.
				op.Old = rdma.U64(binary.NativeEndian.Uint64(src))
			}
		}
		e.release(s)
		i = j
	}
	return nil
}

// runCPU sends ops to the memory node's CPU, as few requests as MsgMax
// allows, one after the other: the memory node executes each request's
// verbs in order, and a request waits for the one before.
func (e *Endpoint) runCPU(ctx context.Context, ops []rdma.Op, mechs []int8) error {
	var sel []rdma.Op
	var idx []int
	flush := func() error {
		if len(sel) == 0 {
			return nil
		}
		err := e.cpuRequest(ctx, sel)
		for k, i := range idx {
			ops[i].Old, ops[i].Err = sel[k].Old, sel[k].Err
		}
		sel, idx = sel[:0], idx[:0]
		return err
	}
	reqSize, repSize := msgHeader, msgHeader
	for i := range ops {
		if mechs[i] < 0 {
			continue
		}
		op := &ops[i]
		rq, rp := opRequestSize(op), opReplySize(op)
		if msgHeader+rq > MsgMax || msgHeader+rp > MsgMax {
			op.Err = fmt.Errorf("%w: %d bytes in one verb (at most about %d through the memory node's CPU)", rdma.ErrBadRequest, len(op.Buf), MsgMax-msgHeader-opFixed-4)
			continue
		}
		if len(sel) > 0 && (reqSize+rq > MsgMax || repSize+rp > MsgMax || len(sel) == 1<<16-1) {
			if err := flush(); err != nil {
				return err
			}
			reqSize, repSize = msgHeader, msgHeader
		}
		sel = append(sel, *op)
		idx = append(idx, i)
		reqSize += rq
		repSize += rp
	}
	return flush()
}

// cpuRequest sends one request and decodes its reply into ops.
func (e *Endpoint) cpuRequest(ctx context.Context, ops []rdma.Op) error {
	select {
	case <-e.credits:
	default:
		select {
		case <-e.credits:
		case <-ctx.Done():
			return ctx.Err()
		case <-e.broken:
			return e.brokenErr
		}
	}
	s, err := e.getSlot(ctx)
	if err != nil {
		e.credits <- struct{}{}
		return err
	}
	s.arm(2, true) // the SEND's completion and the reply
	id := uint32(s.gen)<<16 | uint32(s.idx)
	msg := appendRequest(s.buf[:0], id, ops)
	if len(msg) > MsgMax || &msg[0] != &s.buf[0] {
		panic("verbs: CPU request outgrew its slot") // runCPU sizes requests
	}
	e.wire.doorbells.Add(1)
	e.wire.roundTrips.Add(1)
	e.wire.cpuRequests.Add(1)
	e.wire.cpuOps.Add(uint64(len(ops)))
	wr := []ibv.WR{{ID: wrID(kCPUSend, e.cid, s.idx) | lastFlag, Opcode: ibv.OpSend, Flags: ibv.SendSignaled,
		LocalAddr: s.addr, LocalLen: uint32(len(msg)), LKey: e.mr.LKey}}
	if err := e.run(ctx, s, wr); err != nil {
		return err
	}
	reqErr, err := decodeReply(e.recvBuf(s.reply)[:s.replyLen], ops)
	e.release(s)
	if err != nil {
		err = fmt.Errorf("%w: malformed reply from the memory node: %v", rdma.ErrUnreachable, err)
		e.fail(err)
		return err
	}
	return reqErr
}

// wireCounters count what actually went over the device, next to the
// logical verbs rdma.Counters count.
type wireCounters struct {
	doorbells, roundTrips atomic.Uint64
	wrs                   [8]atomic.Uint64 // one-sided, by ibv opcode
	cpuRequests, cpuOps   atomic.Uint64
	peerSends, peerAcks   atomic.Uint64
	peerRecvs, handshakes atomic.Uint64
}

// Wire is a snapshot of what an endpoint put on its device.
type Wire struct {
	// Doorbells are ibv_post_send calls towards the memory node; each
	// posts one chain of work requests, or one CPU request.
	Doorbells uint64
	// RoundTrips are waits for the memory node: one per chain or request.
	RoundTrips uint64
	// Reads, Writes, CASes and FAAs are one-sided work requests.
	Reads, Writes, CASes, FAAs uint64
	// CPURequests are SENDs to the memory node's CPU, carrying CPUOps verbs;
	// each is answered with one SEND.
	CPURequests, CPUOps uint64
	// PeerSends are SENDs to other members, PeerAcks the acknowledgements
	// this member sent for theirs, PeerRecvs the Sends it received.
	PeerSends, PeerAcks, PeerRecvs uint64
	// Handshakes are queue pairs to other members this member set up.
	Handshakes uint64
}

// Sub returns w - o.
func (w Wire) Sub(o Wire) Wire {
	return Wire{w.Doorbells - o.Doorbells, w.RoundTrips - o.RoundTrips, w.Reads - o.Reads, w.Writes - o.Writes,
		w.CASes - o.CASes, w.FAAs - o.FAAs, w.CPURequests - o.CPURequests, w.CPUOps - o.CPUOps,
		w.PeerSends - o.PeerSends, w.PeerAcks - o.PeerAcks, w.PeerRecvs - o.PeerRecvs, w.Handshakes - o.Handshakes}
}

// Add returns w + o.
func (w Wire) Add(o Wire) Wire {
	return Wire{w.Doorbells + o.Doorbells, w.RoundTrips + o.RoundTrips, w.Reads + o.Reads, w.Writes + o.Writes,
		w.CASes + o.CASes, w.FAAs + o.FAAs, w.CPURequests + o.CPURequests, w.CPUOps + o.CPUOps,
		w.PeerSends + o.PeerSends, w.PeerAcks + o.PeerAcks, w.PeerRecvs + o.PeerRecvs, w.Handshakes + o.Handshakes}
}

// Packets is what w put on the wire, both directions counted, when every
// message fits one packet (one MTU): a one-sided READ, WRITE or atomic is a
// request and its response or acknowledgement; a CPU request is a SEND,
// the transport's acknowledgement, the memory node's reply SEND and its
// acknowledgement; a Send to a member, and the acknowledgement SEND the
// member answers with, are a SEND and a transport acknowledgement each. On
// one device in loopback (soft-RoCE in the test guest) the device both
// sends and receives each of them.
func (w Wire) Packets() uint64 {
	return 2*(w.Reads+w.Writes+w.CASes+w.FAAs) + 4*w.CPURequests + 2*w.PeerSends + 2*w.PeerAcks
}

// SendMessages is how many SEND messages w accounts for: a CPU request
// and its reply, a Send to a member and its acknowledgement (soft-RoCE
// counts them as rdma_sends, and again as rdma_recvs where they land).
func (w Wire) SendMessages() uint64 { return 2*w.CPURequests + w.PeerSends + w.PeerAcks }

// Wire reads the endpoint's device-level counters.
func (e *Endpoint) Wire() Wire {
	c := &e.wire
	return Wire{
		Doorbells: c.doorbells.Load(), RoundTrips: c.roundTrips.Load(),
		Reads: c.wrs[ibv.OpRead].Load(), Writes: c.wrs[ibv.OpWrite].Load(),
		CASes: c.wrs[ibv.OpCompareSwap].Load(), FAAs: c.wrs[ibv.OpFetchAdd].Load(),
		CPURequests: c.cpuRequests.Load(), CPUOps: c.cpuOps.Load(),
		PeerSends: c.peerSends.Load(), PeerAcks: c.peerAcks.Load(), PeerRecvs: c.peerRecvs.Load(),
		Handshakes: c.handshakes.Load(),
	}
}
