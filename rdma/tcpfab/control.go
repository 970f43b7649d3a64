package tcpfab

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// Control-path and Send bodies; see PROTOCOL.md. Decoders never trust a
// count: they stop at the end of the body, so a lying count costs nothing.

func appendJoinRequest(b []byte, r rdma.JoinRequest) []byte {
	b = appendStr(b, r.Name)
	return appendStr(b, r.Addr)
}

func decodeJoinRequest(p []byte) (rdma.JoinRequest, error) {
	d := decoder{b: p}
	r := rdma.JoinRequest{Name: d.str(), Addr: d.str()}
	return r, d.done()
}

func appendPeers(b []byte, ps []rdma.Peer) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ps)))
	for _, p := range ps {
		b = binary.LittleEndian.AppendUint16(b, uint16(p.Node))
		b = appendStr(b, p.Addr)
	}
	return b
}

func decodePeersFrom(d *decoder) []rdma.Peer {
	n := d.u32()
	const minPeer = 4 // node + empty address
	if d.err != nil || uint64(n)*minPeer > uint64(len(d.b)) {
		if d.err == nil {
			d.err = fmt.Errorf("%w: %d peers in %d bytes", rdma.ErrBadRequest, n, len(d.b))
		}
		return nil
	}
	ps := make([]rdma.Peer, 0, n)
	for i := uint32(0); i < n && d.err == nil; i++ {
		ps = append(ps, rdma.Peer{Node: rdma.NodeID(d.u16()), Addr: d.str()})
	}
	return ps
}

func decodePeers(p []byte) ([]rdma.Peer, error) {
	d := decoder{b: p}
	ps := decodePeersFrom(&d)
	return ps, d.done()
}

func appendJoinReply(b []byte, r rdma.JoinReply) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(r.Node))
	l := r.Layout
	b = binary.LittleEndian.AppendUint64(b, l.Generation)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(l.Regions)))
	for _, ri := range l.Regions {
		b = binary.LittleEndian.AppendUint16(b, uint16(ri.ID))
		b = appendStr(b, ri.Name)
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
	d := decoder{b: p}
	var r rdma.JoinReply
	r.Node = rdma.NodeID(d.u16())
	r.Layout.Generation = d.u64()
	n := int(d.u16())
	const minRegion = 12
	if n*minRegion > len(d.b) {
		return rdma.JoinReply{}, fmt.Errorf("%w: %d regions in %d bytes", rdma.ErrBadRequest, n, len(d.b))
	}
	for i := 0; i < n && d.err == nil; i++ {
		r.Layout.Regions = append(r.Layout.Regions, rdma.RegionInfo{ID: rdma.RegionID(d.u16()), Name: d.str(), Size: d.u64()})
	}
	r.Layout.LockEntries = d.u64()
	r.Layout.EraCount = d.u64()
	r.Layout.HeartbeatInterval = time.Duration(d.u64())
	r.Layout.DeadAfter = time.Duration(d.u64())
	r.Layout.MaxLease = time.Duration(d.u64())
	switch d.u8() {
	case 0:
	case 1:
		r.Layout.Persistent = true
	default:
		// Only 0 and 1 are encodings; anything else is a corrupt reply.
		if d.err == nil {
			d.err = fmt.Errorf("%w: persistent flag out of range", rdma.ErrBadRequest)
		}
	}
	r.Peers = decodePeersFrom(&d)
	if err := d.done(); err != nil {
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
	d := decoder{b: p}
	r := rdma.RecoverRequest{Entry: d.u64(), Era: d.u64(), Suspect: rdma.NodeID(d.u16())}
	return r, d.done()
}

func appendRecoverReply(b []byte, r rdma.RecoverReply) []byte {
	b = append(b, uint8(r.Status))
	b = binary.LittleEndian.AppendUint64(b, r.Era)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.RetryAfter))
	return appendStr(b, r.Reason)
}

func decodeRecoverReply(p []byte) (rdma.RecoverReply, error) {
	d := decoder{b: p}
	r := rdma.RecoverReply{Status: rdma.RecoverStatus(d.u8()), Era: d.u64(), RetryAfter: time.Duration(d.u64()), Reason: d.str()}
	return r, d.done()
}

func appendRangeRequest(b []byte, r rdma.RangeRequest) []byte {
	b = append(b, uint8(r.Op))
	b = append(b, r.Name[:]...)
	return binary.LittleEndian.AppendUint64(b, r.Tree)
}

func decodeRangeRequest(p []byte) (rdma.RangeRequest, error) {
	d := decoder{b: p}
	r := rdma.RangeRequest{Op: rdma.RangeOp(d.u8())}
	copy(r.Name[:], d.take(rdma.RangeNameSize))
	r.Tree = d.u64()
	return r, d.done()
}

func appendRangeReply(b []byte, r rdma.RangeReply) []byte {
	b = append(b, uint8(r.Status))
	b = binary.LittleEndian.AppendUint64(b, r.Tree)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.RetryAfter))
	return appendStr(b, r.Reason)
}

func decodeRangeReply(p []byte) (rdma.RangeReply, error) {
	d := decoder{b: p}
	r := rdma.RangeReply{Status: rdma.RangeStatus(d.u8()), Tree: d.u64(), RetryAfter: time.Duration(d.u64()), Reason: d.str()}
	if err := d.done(); err != nil {
		return rdma.RangeReply{}, err
	}
	if r.Status < rdma.RangeOK || r.Status > rdma.RangeBusy {
		return rdma.RangeReply{}, fmt.Errorf("%w: range status %d", rdma.ErrBadRequest, r.Status)
	}
	return r, nil
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
	d := decoder{b: p}
	from = rdma.NodeID(d.u16())
	to = rdma.NodeID(d.u16())
	t := d.u32()
	copy(m.Payload[:], d.take(rdma.PayloadSize))
	if err := d.done(); err != nil {
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
	d := decoder{b: p}
	f := d.u8()
	if f&^(ackDelivered|ackErr) != 0 {
		return false, nil, fmt.Errorf("%w: ack flags %#x", rdma.ErrBadRequest, f)
	}
	if f&ackErr != 0 {
		sendErr = decodeError(&d)
	}
	return f&ackDelivered != 0, sendErr, d.done()
}
