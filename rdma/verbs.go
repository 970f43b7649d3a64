package rdma

import (
	"context"
	"errors"
	"fmt"
)

// NodeID names a node in a memory node's domain. The memory node assigns it
// when the node joins. Zero is never assigned: a zero NodeID is how a lock
// entry spells "no tail".
type NodeID uint16

// Target is a 24-bit receive slot on a node, the analogue of a DC target QP
// number. A Send names (NodeID, Target).
type Target uint32

// MaxTarget is the largest valid Target.
const MaxTarget Target = 1<<24 - 1

// RegionID names a registered memory region on a memory node.
type RegionID uint16

// Addr is a remote address: a byte offset inside a registered region of the
// endpoint's memory node. Atomics need 8-byte alignment (16-byte for 16-byte
// atomics); Read and Write need 8-byte aligned offsets and lengths.
type Addr struct {
	Region RegionID
	Offset uint64
}

func (a Addr) String() string { return fmt.Sprintf("r%d+%#x", a.Region, a.Offset) }

// PayloadSize is the fixed size of a Send payload. Handover notifications are
// a few words; a fixed size keeps the in-process path free of allocations.
const PayloadSize = 32

// Payload is the body of a two-sided message. Its meaning belongs to the
// protocol that sends it.
type Payload [PayloadSize]byte

// Message is a delivered Send.
type Message struct {
	From    NodeID
	To      Target
	Payload Payload
}

// Errors a verb can return. Fabrics wrap them with detail; test them with
// errors.Is.
var (
	// ErrUnreachable: the peer or memory node is dead, unknown or cut off
	// (the RDMA retry-exceeded analogue).
	ErrUnreachable = errors.New("rdma: peer unreachable")
	// ErrNotReady: the target has no receive posted (the RNR analogue).
	ErrNotReady = errors.New("rdma: receiver not ready")
	// ErrClosed: the local endpoint was closed.
	ErrClosed = errors.New("rdma: endpoint closed")
	// ErrUnknownRegion: the address names no registered region.
	ErrUnknownRegion = errors.New("rdma: unknown region")
	// ErrOutOfBounds: the access runs past the end of its region.
	ErrOutOfBounds = errors.New("rdma: access out of bounds")
	// ErrMisaligned: the offset or length breaks the verb's alignment rule.
	ErrMisaligned = errors.New("rdma: misaligned access")
	// ErrUnavailable: the memory node refuses service for now, e.g. during
	// its restart grace period. Try again later.
	ErrUnavailable = errors.New("rdma: memory node unavailable")
	// ErrBadRequest: the request is malformed in some other way.
	ErrBadRequest = errors.New("rdma: bad request")
)

// Endpoint is one node's attachment to a memory node's domain: the queue
// pairs to the memory node, a connectionless initiator for Sends to other
// nodes, and a receive queue for Sends to this node.
//
// All methods are safe for concurrent use. Verbs issued by one goroutine
// complete in order. Atomics on one address are serialised by the memory node,
// as an RNIC serialises them. A verb on a dead memory node returns an error
// wrapping ErrUnreachable; it never hangs past its context.
type Endpoint interface {
	// Node is this endpoint's NodeID in its domain.
	Node() NodeID
	// Layout describes the memory node this endpoint joined.
	Layout() Layout

	Read(ctx context.Context, a Addr, p []byte) error
	Write(ctx context.Context, a Addr, p []byte) error
	// CAS and FAA are the standard 8-byte atomics; they return the old value.
	CAS(ctx context.Context, a Addr, cmp, swap uint64) (uint64, error)
	FAA(ctx context.Context, a Addr, add uint64) (uint64, error)
	// Masked atomics follow ApplyMaskedCAS and ApplyMaskedFAA and return the
	// whole old value, whatever the masks.
	MaskedCAS64(ctx context.Context, a Addr, cmp, cmpMask, swap, swapMask uint64) (uint64, error)
	MaskedFAA64(ctx context.Context, a Addr, add, boundary uint64) (uint64, error)
	MaskedCAS128(ctx context.Context, a Addr, cmp, cmpMask, swap, swapMask U128) (U128, error)
	MaskedFAA128(ctx context.Context, a Addr, add, boundary U128) (U128, error)
	// Post issues every verb of b in one round trip; they complete in order.
	// The returned error is a transport failure; per-verb errors are in b.
	Post(ctx context.Context, b *Batch) error

	// Send delivers p to target t on node to, reliably, without waiting for
	// the receiver to act on it.
	// queued the message (the send completion), or with an error wrapping
	// ErrUnreachable or ErrNotReady.
	Send(ctx context.Context, to NodeID, t Target, p Payload) error
	// Bind installs the receive handler. Until Bind is called, Sends to this
	// node fail with ErrNotReady. The handler runs on the fabric's delivery
	// goroutine and must not block; Inbox.Deliver is a handler that never
	// does. An error from the handler fails the sender's Send.
	Bind(func(Message) error)

	// BindProbe installs the handler that answers the memory node's probes
	// during recovery. Without one, a node answers HoldActive for every
	// entry, which is always safe and blocks recovery.
	BindProbe(func(entry uint64) Hold)

	// Control reaches the memory node's control path (join, peers, recovery).
	Control() Control
	// Counters are this endpoint's outbound verbs and its inbound Sends.
	Counters() *Counters
	// Close leaves the domain. Later verbs return ErrClosed.
	Close() error
}

// Inliner is implemented by endpoints whose verbs and Sends complete in the
// calling goroutine without ever blocking on I/O: the in-process fabric.
// A caller that must not block (a server's event loop) may issue verbs on
// such an endpoint directly and must hand any other endpoint's verbs to a
// goroutine of their own.
type Inliner interface {
	Inline() bool
}

// IsInline reports whether ep's verbs complete without blocking (Inliner).
func IsInline(ep Endpoint) bool {
	in, ok := ep.(Inliner)
	return ok && in.Inline()
}
