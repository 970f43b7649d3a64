// Package memfab is the in-process fabric: endpoints in one address space
// reach a memory node's regions by direct, serialised memory access and send
// messages by direct delivery. It is what the embedded proxy runs on and what
// most tests use, so its verbs do no allocation and take no global lock.
package memfab

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// Fabric connects endpoints to one memory node.
type Fabric struct {
	host rdma.Host
	eps  [1 << 16]atomic.Pointer[Endpoint]
}

// New returns a fabric serving host. It installs itself as host's prober.
func New(host rdma.Host) *Fabric {
	f := &Fabric{host: host}
	host.SetProber(f)
	return f
}

// Host is the memory node this fabric serves.
func (f *Fabric) Host() rdma.Host { return f.host }

// Join attaches a new endpoint to the memory node.
func (f *Fabric) Join(name string) (*Endpoint, error) {
	rep, err := f.host.Join(rdma.JoinRequest{Name: name})
	if err != nil {
		return nil, err
	}
	e := &Endpoint{f: f, node: rep.Node, layout: rep.Layout, in: f.host.Counters()}
	for _, r := range rep.Layout.Regions {
		if int(r.ID) < len(e.regions) {
			e.regions[r.ID] = f.host.Region(r.ID)
		}
	}
	f.eps[rep.Node].Store(e)
	return e, nil
}

// Probe implements rdma.Prober by asking the endpoint's probe handler.
func (f *Fabric) Probe(ctx context.Context, n rdma.NodeID, entry uint64) (rdma.Hold, error) {
	e := f.eps[n].Load()
	if e == nil || e.closed.Load() {
		return 0, fmt.Errorf("%w: node %d", rdma.ErrUnreachable, n)
	}
	p := e.probe.Load()
	if p == nil {
		return rdma.HoldActive, nil
	}
	return (*p)(entry), nil
}

// Endpoint is one node's attachment. It implements rdma.Endpoint.
type Endpoint struct {
	f       *Fabric
	node    rdma.NodeID
	layout  rdma.Layout
	regions [8]*rdma.Memory
	ctrs    rdma.Counters
	in      *rdma.Counters // the memory node's inbound counters
	recv    atomic.Pointer[func(rdma.Message) error]
	probe   atomic.Pointer[func(uint64) rdma.Hold]
	closed  atomic.Bool
}

var _ rdma.Endpoint = (*Endpoint)(nil)

func (e *Endpoint) Node() rdma.NodeID                   { return e.node }
func (e *Endpoint) Layout() rdma.Layout                 { return e.layout }
func (e *Endpoint) Counters() *rdma.Counters            { return &e.ctrs }
func (e *Endpoint) Control() rdma.Control               { return control{e} }
func (e *Endpoint) Bind(fn func(rdma.Message) error)    { e.recv.Store(&fn) }
func (e *Endpoint) BindProbe(fn func(uint64) rdma.Hold) { e.probe.Store(&fn) }

// Inline implements rdma.Inliner: every verb is a direct memory access and
// every Send a direct delivery, so none of them blocks.
func (e *Endpoint) Inline() bool { return true }

// Close leaves the memory node. Verbs and Sends fail afterwards, and Sends
// to this node fail as they would to a dead one.
func (e *Endpoint) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	e.f.eps[e.node].CompareAndSwap(e, nil)
	e.f.host.Leave(e.node)
	return nil
}

// Kill makes the endpoint vanish without leaving, as a crashed process would:
// the memory node finds out only through missed heartbeats.
func (e *Endpoint) Kill() {
	e.closed.Store(true)
	e.f.eps[e.node].CompareAndSwap(e, nil)
}

// region resolves a, counting the verb in both directions on success.
func (e *Endpoint) region(ctx context.Context, v rdma.Verb, a rdma.Addr) (*rdma.Memory, error) {
	if e.closed.Load() {
		return nil, rdma.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := e.f.host.Admit(e.node); err != nil {
		return nil, err
	}
	var m *rdma.Memory
	if int(a.Region) < len(e.regions) {
		m = e.regions[a.Region]
	}
	if m == nil {
		return nil, fmt.Errorf("%w: %d", rdma.ErrUnknownRegion, a.Region)
	}
	e.ctrs.Out(v)
	e.ctrs.Out(rdma.VerbBatch)
	e.in.In(v)
	e.in.In(rdma.VerbBatch)
	return m, nil
}

func (e *Endpoint) Read(ctx context.Context, a rdma.Addr, p []byte) error {
	m, err := e.region(ctx, rdma.VerbRead, a)
	if err != nil {
		return err
	}
	return m.Read(a.Offset, p)
}

func (e *Endpoint) Write(ctx context.Context, a rdma.Addr, p []byte) error {
	m, err := e.region(ctx, rdma.VerbWrite, a)
	if err != nil {
		return err
	}
	return m.Write(a.Offset, p)
}

func (e *Endpoint) CAS(ctx context.Context, a rdma.Addr, cmp, swap uint64) (uint64, error) {
	m, err := e.region(ctx, rdma.VerbCAS, a)
	if err != nil {
		return 0, err
	}
	return m.MaskedCAS64(a.Offset, cmp, ^uint64(0), swap, ^uint64(0))
}

func (e *Endpoint) FAA(ctx context.Context, a rdma.Addr, add uint64) (uint64, error) {
	m, err := e.region(ctx, rdma.VerbFAA, a)
	if err != nil {
		return 0, err
	}
	return m.MaskedFAA64(a.Offset, add, 0)
}

func (e *Endpoint) MaskedCAS64(ctx context.Context, a rdma.Addr, cmp, cmpMask, swap, swapMask uint64) (uint64, error) {
	m, err := e.region(ctx, rdma.VerbMaskedCAS, a)
	if err != nil {
		return 0, err
	}
	return m.MaskedCAS64(a.Offset, cmp, cmpMask, swap, swapMask)
}

func (e *Endpoint) MaskedFAA64(ctx context.Context, a rdma.Addr, add, boundary uint64) (uint64, error) {
	m, err := e.region(ctx, rdma.VerbMaskedFAA, a)
	if err != nil {
		return 0, err
	}
	return m.MaskedFAA64(a.Offset, add, boundary)
}

func (e *Endpoint) MaskedCAS128(ctx context.Context, a rdma.Addr, cmp, cmpMask, swap, swapMask rdma.U128) (rdma.U128, error) {
	m, err := e.region(ctx, rdma.VerbMaskedCAS, a)
	if err != nil {
		return rdma.U128{}, err
	}
	return m.MaskedCAS128(a.Offset, cmp, cmpMask, swap, swapMask)
}

func (e *Endpoint) MaskedFAA128(ctx context.Context, a rdma.Addr, add, boundary rdma.U128) (rdma.U128, error) {
	m, err := e.region(ctx, rdma.VerbMaskedFAA, a)
	if err != nil {
		return rdma.U128{}, err
	}
	return m.MaskedFAA128(a.Offset, add, boundary)
}

// Post executes the batch in order. In-process there is no round trip to
// save, but the counters still see one doorbell for the whole batch.
func (e *Endpoint) Post(ctx context.Context, b *rdma.Batch) error {
	if e.closed.Load() {
		return rdma.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := e.f.host.Admit(e.node); err != nil {
		return err
	}
	e.ctrs.Out(rdma.VerbBatch)
	e.in.In(rdma.VerbBatch)
	for i := range b.Ops {
		op := &b.Ops[i]
		var m *rdma.Memory
		if int(op.Addr.Region) < len(e.regions) {
			m = e.regions[op.Addr.Region]
		}
		if m == nil {
			op.Err = fmt.Errorf("%w: %d", rdma.ErrUnknownRegion, op.Addr.Region)
			continue
		}
		e.ctrs.Out(op.Verb)
		e.in.In(op.Verb)
		m.Exec(op)
	}
	return nil
}

// Send delivers directly into the target node's receive handler.
func (e *Endpoint) Send(ctx context.Context, to rdma.NodeID, t rdma.Target, p rdma.Payload) error {
	if e.closed.Load() {
		return rdma.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	dst := e.f.eps[to].Load()
	if dst == nil || dst.closed.Load() {
		return fmt.Errorf("%w: node %d", rdma.ErrUnreachable, to)
	}
	fn := dst.recv.Load()
	if fn == nil {
		return fmt.Errorf("%w: node %d has no receive handler", rdma.ErrNotReady, to)
	}
	e.ctrs.Out(rdma.VerbSend)
	dst.ctrs.In(rdma.VerbSend)
	return (*fn)(rdma.Message{From: e.node, To: t, Payload: p})
}

type control struct{ e *Endpoint }

func (c control) Peers(ctx context.Context) ([]rdma.Peer, error) {
	if c.e.closed.Load() {
		return nil, rdma.ErrClosed
	}
	c.e.ctrs.Out(rdma.VerbControl)
	return c.e.f.host.Peers(), nil
}

func (c control) Recover(ctx context.Context, req rdma.RecoverRequest) (rdma.RecoverReply, error) {
	if c.e.closed.Load() {
		return rdma.RecoverReply{}, rdma.ErrClosed
	}
	if err := c.e.f.host.Admit(c.e.node); err != nil {
		return rdma.RecoverReply{}, err
	}
	c.e.ctrs.Out(rdma.VerbControl)
	c.e.in.In(rdma.VerbControl)
	return c.e.f.host.Recover(ctx, req)
}

// Range implements rdma.RangeControl when the host serves range-lock names.
func (c control) Range(ctx context.Context, req rdma.RangeRequest) (rdma.RangeReply, error) {
	if c.e.closed.Load() {
		return rdma.RangeReply{}, rdma.ErrClosed
	}
	rh, ok := c.e.f.host.(rdma.RangeHost)
	if !ok {
		return rdma.RangeReply{}, fmt.Errorf("%w: the memory node serves no range locks", rdma.ErrBadRequest)
	}
	c.e.ctrs.Out(rdma.VerbControl)
	c.e.in.In(rdma.VerbControl)
	return rh.Range(ctx, c.e.node, req)
}

var _ rdma.RangeControl = control{}
