package tcpfab

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/internal/wire"
)

// Control-path and Send bodies; see PROTOCOL.md. Decoders never trust a
// count: they stop at the end of the body, so a lying count costs nothing.

func appendJoinRequest(b []byte, r rdma.JoinRequest) []byte {
	b = wire.AppendStr(b, r.Name)
	return wire.AppendStr(b, r.Addr)
}

func decodeJoinRequest(p []byte) (rdma.JoinRequest, error) {
	d := newDecoder(p)
	r := rdma.JoinRequest{Name: d.Str(), Addr: d.Str()}
	return r, d.Done(trailing)
}

func appendPeers(b []byte, ps []rdma.Peer) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ps)))
	for _, p := range ps {
		b = binary.LittleEndian.AppendUint16(b, uint16(p.Node))
		b = wire.AppendStr(b, p.Addr)
	}
	return b
}

func decodePeersFrom(d *wire.Decoder) []rdma.Peer {
	n := d.U32()
	const minPeer = 4 // node + empty address
	if d.Err != nil || uint64(n)*minPeer > uint64(len(d.B)) {
		if d.Err == nil {
			d.Err = fmt.Errorf("%w: %d peers in %d bytes", rdma.ErrBadRequest, n, len(d.B))
		}
		return nil
	}
	ps := make([]rdma.Peer, 0, n)
	for i := uint32(0); i < n && d.Err == nil; i++ {
		ps = append(ps, rdma.Peer{Node: rdma.NodeID(d.U16()), Addr: d.Str()})
	}
	return ps
}

func decodePeers(p []byte) ([]rdma.Peer, error) {
	d := newDecoder(p)
	ps := decodePeersFrom(&d)
	return ps, d.Done(trailing)
}

func appendJoinReply(b []byte, r rdma.JoinReply) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(r.Node))
	l := r.Layout
	b = binary.LittleEndian.AppendUint64(b, l.Generation)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(l.Regions)))
	for _, ri := range l.Regions {
		b = binary.LittleEndian.AppendUint16(b, uint16(ri.ID))
		b = wire.AppendStr(b, ri.Name)
		b = binary.LittleEndian.AppendUint64(b, ri.Size)
	}
	b = binary.LittleEndian.AppendUint64(b, l.LockEntries)
	b = binary.LittleEndian.AppendUint64(b, l.EraCount)
	b = binary.LittleEndian.AppendUint64(b, uint64(l.HeartbeatInterval))
	b = binary.LittleEndian.AppendUint64(b, uint64(l.DeadAfter))
	b = binary.LittleEndian.AppendUint64(b, uint64(l.MaxLease))
	persistent := uint8(0)
	if l.Persistent {
		persistent = 1
	}
	b = append(b, persistent)
	return appendPeers(b, r.Peers)
}

func decodeJoinReply(p []byte) (rdma.JoinReply, error) {
	d := newDecoder(p)
	var r rdma.JoinReply
	r.Node = rdma.NodeID(d.U16())
	r.Layout.Generation = d.U64()
	n := int(d.U16())
	const minRegion = 12
	if n*minRegion > len(d.B) {
		return rdma.JoinReply{}, fmt.Errorf("%w: %d regions in %d bytes", rdma.ErrBadRequest, n, len(d.B))
	}
	for i := 0; i < n && d.Err == nil; i++ {
		r.Layout.Regions = append(r.Layout.Regions, rdma.RegionInfo{ID: rdma.RegionID(d.U16()), Name: d.Str(), Size: d.U64()})
	}
	r.Layout.LockEntries = d.U64()
	r.Layout.EraCount = d.U64()
	r.Layout.HeartbeatInterval = time.Duration(d.U64())
	r.Layout.DeadAfter = time.Duration(d.U64())
	r.Layout.MaxLease = time.Duration(d.U64())
	switch d.U8() {
	case 0:
	case 1:
		r.Layout.Persistent = true
	default:
		// Only 0 and 1 are encodings; anything else is a corrupt reply.
		if d.Err == nil {
			d.Err = fmt.Errorf("%w: persistent flag out of range", rdma.ErrBadRequest)
		}
	}
	r.Peers = decodePeersFrom(&d)
	if err := d.Done(trailing); err != nil {
		return rdma.JoinReply{}, err
	}
	return r, nil
}

func appendRecoverRequest(b []byte, r rdma.RecoverRequest) []byte {
	b = binary.LittleEndian.AppendUint64(b, r.Entry)
	b = binary.LittleEndian.AppendUint64(b, r.Era)
	return binary.LittleEndian.AppendUint16(b, uint16(r.Suspect))
}

func decodeRecoverRequest(p []byte) (rdma.RecoverRequest, error) {
	d := newDecoder(p)
	r := rdma.RecoverRequest{Entry: d.U64(), Era: d.U64(), Suspect: rdma.NodeID(d.U16())}
	return r, d.Done(trailing)
}

// appendRecoverReply and appendRangeReply encode a status reply: a status
// byte, a word (the era, the tree), a retry hint and a reason.
func appendRecoverReply(b []byte, r rdma.RecoverReply) []byte {
	return appendStatusReply(b, uint8(r.Status), r.Era, r.RetryAfter, r.Reason)
}

func decodeRecoverReply(p []byte) (rdma.RecoverReply, error) {
	st, era, retry, reason, err := decodeStatusReply(p, uint8(rdma.RecoverDone), uint8(rdma.RecoverNotYet), "recover")
	if err != nil {
		return rdma.RecoverReply{}, err
	}
	return rdma.RecoverReply{Status: rdma.RecoverStatus(st), Era: era, RetryAfter: retry, Reason: reason}, nil
}

func appendRangeRequest(b []byte, r rdma.RangeRequest) []byte {
	b = append(b, uint8(r.Op))
	b = append(b, r.Name[:]...)
	return binary.LittleEndian.AppendUint64(b, r.Tree)
}

func decodeRangeRequest(p []byte) (rdma.RangeRequest, error) {
	d := newDecoder(p)
	r := rdma.RangeRequest{Op: rdma.RangeOp(d.U8())}
	copy(r.Name[:], d.Take(rdma.RangeNameSize))
	r.Tree = d.U64()
	return r, d.Done(trailing)
}

func appendRangeReply(b []byte, r rdma.RangeReply) []byte {
	return appendStatusReply(b, uint8(r.Status), r.Tree, r.RetryAfter, r.Reason)
}

func decodeRangeReply(p []byte) (rdma.RangeReply, error) {
	st, tree, retry, reason, err := decodeStatusReply(p, uint8(rdma.RangeOK), uint8(rdma.RangeBusy), "range")
	if err != nil {
		return rdma.RangeReply{}, err
	}
	return rdma.RangeReply{Status: rdma.RangeStatus(st), Tree: tree, RetryAfter: retry, Reason: reason}, nil
}

func appendStatusReply(b []byte, status uint8, word uint64, retry time.Duration, reason string) []byte {
	b = append(b, status)
	b = binary.LittleEndian.AppendUint64(b, word)
	b = binary.LittleEndian.AppendUint64(b, uint64(retry))
	return wire.AppendStr(b, reason)
}

// decodeStatusReply decodes a status reply whose status must lie in
// [lo, hi]: a caller acts on the statuses it knows, and one it does not
// know is a corrupt reply, not a silent no-op.
func decodeStatusReply(p []byte, lo, hi uint8, what string) (status uint8, word uint64, retry time.Duration, reason string, err error) {
	d := newDecoder(p)
	status, word, retry, reason = d.U8(), d.U64(), time.Duration(d.U64()), d.Str()
	if err := d.Done(trailing); err != nil {
		return 0, 0, 0, "", err
	}
	if status < lo || status > hi {
		return 0, 0, 0, "", fmt.Errorf("%w: %s status %d", rdma.ErrBadRequest, what, status)
	}
	return status, word, retry, reason, nil
}

const sendBodySize = 2 + 2 + 4 + rdma.PayloadSize

// appendSend encodes a Send. The destination travels with it so that a node
// reached at a stale address (its port reused by someone else) refuses.
func appendSend(b []byte, from, to rdma.NodeID, t rdma.Target, p *rdma.Payload) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(from))
	b = binary.LittleEndian.AppendUint16(b, uint16(to))
	b = binary.LittleEndian.AppendUint32(b, uint32(t))
	return append(b, p[:]...)
}

func decodeSend(p []byte) (from, to rdma.NodeID, m rdma.Message, err error) {
	d := newDecoder(p)
	from = rdma.NodeID(d.U16())
	to = rdma.NodeID(d.U16())
	t := d.U32()
	copy(m.Payload[:], d.Take(rdma.PayloadSize))
	if err := d.Done(trailing); err != nil {
		return 0, 0, rdma.Message{}, err
	}
	if t > uint32(rdma.MaxTarget) {
		return 0, 0, rdma.Message{}, fmt.Errorf("%w: target %#x", rdma.ErrBadRequest, t)
	}
	m.From, m.To = from, rdma.Target(t)
	return from, to, m, nil
}

// A Send ack says whether the message reached the receive handler (which is
// what the counters count) and the handler's or the receiver's error.
const (
	ackDelivered = 1
	ackErr       = 2
)

func appendSendAck(b []byte, delivered bool, err error) []byte {
	var f uint8
	if delivered {
		f |= ackDelivered
	}
	if err != nil {
		f |= ackErr
	}
	b = append(b, f)
	if err != nil {
		b = appendError(b, err, 1024)
	}
	return b
}

func decodeSendAck(p []byte) (delivered bool, sendErr, err error) {
	d := newDecoder(p)
	f := d.U8()
	if f&^(ackDelivered|ackErr) != 0 {
		return false, nil, fmt.Errorf("%w: ack flags %#x", rdma.ErrBadRequest, f)
	}
	if f&ackErr != 0 {
		sendErr = decodeError(&d)
	}
	return f&ackDelivered != 0, sendErr, d.Done(trailing)
}
