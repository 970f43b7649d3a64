package verbs

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/internal/wire"
)

// The messages of the verbs fabric. None of them needs cgo, so that they
// are fuzzed in the default build. All integers are little-endian.
//
// Set-up rides the memory node's TCP control connection (tcpfab ATTACH,
// behind the fabric secret): AttachRequest and AttachReply. Everything else
// travels as RDMA SENDs:
//
//   - on a member's queue pair to its memory node, CPU requests and their
//     replies: the verbs on words the memory node's CPU serves (see
//     Mechanism), batched, executed in order;
//   - on queue pairs between members, a member's Sends (PeerData) and the
//     receiver's acknowledgements (PeerAck).
//
// Queue pairs between members are set up with Handshake payloads, carried
// by tcpfab Sends between the members' peer ports (also behind the secret).

const (
	wireVersion = 1
	msgMagic    = 0x5C

	typeRequest = 1
	typeReply   = 2
	typeError   = 3
	typeData    = 4
	typeAck     = 5

	msgHeader = 8 // magic, type, u16 count, u32 id

	// MsgMax is the largest CPU request or reply: the size of every
	// receive buffer on a member's queue pair to its memory node. A batch
	// that needs more goes as several messages.
	MsgMax = 8192

	// peerMsgMax is the size of receive buffers on queue pairs between
	// members: room for a Send or an acknowledgement with its error text.
	peerMsgMax = 256

	// maxErrText bounds an error's text in any message.
	maxErrText = 160
)

var (
	errShort = errors.New("verbs: truncated message")
	errMagic = errors.New("verbs: bad message magic")
)

// Mechanism is how a region's words are reached. Every access to a word
// goes through one mechanism, so that atomics on it are atomic with respect
// to each other and 16-byte entries are never seen torn.
type Mechanism uint8

const (
	// CPU: the memory node's CPU executes every verb on the region, through
	// rdma.Memory, for requests that arrive as two-sided SENDs. The region
	// is not registered for remote access at all, so a one-sided verb on
	// it is impossible by construction.
	CPU Mechanism = iota
	// OneSided: clients reach the region with one-sided verbs only, within
	// the access rights the region was registered with; the memory node's
	// CPU reads and writes aligned 8-byte words of it but never performs a
	// read-modify-write that a client's atomic could interleave with.
	OneSided
)

func (m Mechanism) String() string {
	switch m {
	case CPU:
		return "cpu"
	case OneSided:
		return "one-sided"
	}
	return fmt.Sprintf("mechanism(%d)", uint8(m))
}

// Rights of a one-sided region, as advertised in AttachReply.
const (
	RightRead   = 1 << 0
	RightWrite  = 1 << 1
	RightAtomic = 1 << 2
)

// RegionMap is one region as a member reaches it.
type RegionMap struct {
	ID     rdma.RegionID
	Mech   Mechanism
	Rights uint8 // one-sided regions: RightRead | RightWrite | RightAtomic
	Addr   uint64
	RKey   uint32
	Size   uint64
}

// QPInfo names one end of a queue-pair connection.
type QPInfo struct {
	QPN, PSN uint32
	GID      [16]byte
}

// AttachRequest is a member's half of its queue pair to the memory node.
type AttachRequest struct {
	QP QPInfo
}

// AttachReply is the memory node's half, and how to reach its regions.
type AttachReply struct {
	QP QPInfo
	// Credits is the number of receive buffers the memory node keeps
	// posted for the member: how many CPU requests it may have in flight.
	Credits uint16
	// Mode is the memory node's lock-table mode (LockTableMode).
	Mode    LockTableMode
	Device  string // the memory node's device, for logs
	Regions []RegionMap
}

func appendQP(b []byte, q QPInfo) []byte {
	b = binary.LittleEndian.AppendUint32(b, q.QPN)
	b = binary.LittleEndian.AppendUint32(b, q.PSN)
	return append(b, q.GID[:]...)
}

// newDecoder reads a message (wire.Decoder).
func newDecoder(p []byte) wire.Decoder { return wire.Decoder{B: p, Short: errShort} }

func decodeQP(d *wire.Decoder) QPInfo {
	q := QPInfo{QPN: d.U32(), PSN: d.U32()}
	copy(q.GID[:], d.Take(16))
	return q
}

// trailing fails a message with bytes left over.
func trailing(n int) error { return fmt.Errorf("verbs: %d trailing bytes", n) }

// Encode appends the request's wire form.
func (r AttachRequest) Encode(b []byte) []byte {
	b = append(b, wireVersion)
	return appendQP(b, r.QP)
}

// DecodeAttachRequest parses an AttachRequest.
func DecodeAttachRequest(p []byte) (AttachRequest, error) {
	d := newDecoder(p)
	if v := d.U8(); d.Err == nil && v != wireVersion {
		return AttachRequest{}, fmt.Errorf("%w: verbs attach version %d, this memory node speaks %d", rdma.ErrBadRequest, v, wireVersion)
	}
	r := AttachRequest{QP: decodeQP(&d)}
	if err := d.Done(trailing); err != nil {
		return AttachRequest{}, fmt.Errorf("%w: attach request: %v", rdma.ErrBadRequest, err)
	}
	return r, nil
}

// Encode appends the reply's wire form.
func (r AttachReply) Encode(b []byte) []byte {
	b = append(b, wireVersion)
	b = appendQP(b, r.QP)
	b = binary.LittleEndian.AppendUint16(b, r.Credits)
	b = append(b, byte(r.Mode))
	b = wire.AppendStr(b, r.Device)
	b = append(b, byte(len(r.Regions)))
	for _, m := range r.Regions {
		b = binary.LittleEndian.AppendUint16(b, uint16(m.ID))
		b = append(b, byte(m.Mech), m.Rights)
		b = binary.LittleEndian.AppendUint64(b, m.Addr)
		b = binary.LittleEndian.AppendUint32(b, m.RKey)
		b = binary.LittleEndian.AppendUint64(b, m.Size)
	}
	return b
}

// DecodeAttachReply parses an AttachReply.
func DecodeAttachReply(p []byte) (AttachReply, error) {
	d := newDecoder(p)
	if v := d.U8(); d.Err == nil && v != wireVersion {
		return AttachReply{}, fmt.Errorf("verbs attach reply version %d, want %d", v, wireVersion)
	}
	r := AttachReply{QP: decodeQP(&d), Credits: d.U16(), Mode: LockTableMode(d.U8()), Device: d.Str()}
	n := int(d.U8())
	for i := 0; i < n && d.Err == nil; i++ {
		m := RegionMap{ID: rdma.RegionID(d.U16()), Mech: Mechanism(d.U8()), Rights: d.U8(), Addr: d.U64(), RKey: d.U32(), Size: d.U64()}
		if m.Mech > OneSided {
			return AttachReply{}, fmt.Errorf("verbs attach reply: region %d has unknown mechanism %d", m.ID, m.Mech)
		}
		r.Regions = append(r.Regions, m)
	}
	if err := d.Done(trailing); err != nil {
		return AttachReply{}, fmt.Errorf("verbs attach reply: %v", err)
	}
	if r.Credits == 0 {
		return AttachReply{}, errors.New("verbs attach reply: no credits")
	}
	return r, nil
}

// The error sentinels a message can carry, by bit: the same numbering as
// tcpfab's (PROTOCOL.md), so that an error means the same on either fabric.
var errBits = [...]error{
	rdma.ErrUnreachable, rdma.ErrNotReady, rdma.ErrClosed, rdma.ErrUnknownRegion,
	rdma.ErrOutOfBounds, rdma.ErrMisaligned, rdma.ErrUnavailable, rdma.ErrBadRequest, rdma.ErrFenced,
}

func appendErr(b []byte, err error) []byte {
	var mask uint16
	for i, s := range errBits {
		if errors.Is(err, s) {
			mask |= 1 << i
		}
	}
	text := err.Error()
	if len(text) > maxErrText {
		text = text[:maxErrText]
	}
	b = binary.LittleEndian.AppendUint16(b, mask)
	b = append(b, byte(len(text)))
	return append(b, text...)
}

// wireError is an error that arrived in a message: it matches the
// sentinels its sender's error matched.
type wireError struct {
	text string
	mask uint16
}

func (e *wireError) Error() string { return e.text }

func (e *wireError) Is(target error) bool {
	for i, s := range errBits {
		if target == s {
			return e.mask&(1<<i) != 0
		}
	}
	return false
}

func decodeErr(d *wire.Decoder) error {
	mask := d.U16()
	text := string(d.Take(int(d.U8())))
	if d.Err != nil {
		return nil
	}
	if mask == 0 && text == "" {
		return &wireError{text: "verbs: unspecified error"}
	}
	return &wireError{text: text, mask: mask}
}

// Sizes of the parts of a CPU request and reply.
const (
	opFixed     = wire.OpFixed // verb, flags, region, offset
	errReserve  = 3 + maxErrText
	flagWide    = wire.FlagWide
	statusOK    = wire.StatusOK
	statusError = wire.StatusErr
)

func operandSize(wide bool) int {
	if wide {
		return 16
	}
	return 8
}

// opRequestSize is the size of op in a CPU request, or -1 for a verb that is
// not a memory verb.
func opRequestSize(op *rdma.Op) int {
	switch op.Verb {
	case rdma.VerbRead:
		return opFixed + 4
	case rdma.VerbWrite:
		return opFixed + 4 + len(op.Buf)
	case rdma.VerbCAS, rdma.VerbMaskedCAS:
		return opFixed + 4*operandSize(op.Wide)
	case rdma.VerbFAA, rdma.VerbMaskedFAA:
		return opFixed + 2*operandSize(op.Wide)
	}
	return -1
}

// opReplySize is the most op's result can take in a CPU reply.
func opReplySize(op *rdma.Op) int {
	n := 1
	switch op.Verb {
	case rdma.VerbRead:
		n += len(op.Buf)
	case rdma.VerbCAS, rdma.VerbMaskedCAS, rdma.VerbFAA, rdma.VerbMaskedFAA:
		n += operandSize(op.Wide)
	}
	return max(n, 1+errReserve)
}

// appendRequest appends a CPU request carrying ops (every one a memory verb).
func appendRequest(b []byte, id uint32, ops []rdma.Op) []byte {
	b = append(b, msgMagic, typeRequest)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(ops)))
	b = binary.LittleEndian.AppendUint32(b, id)
	for i := range ops {
		op := &ops[i]
		var flags byte
		if op.Wide {
			flags |= flagWide
		}
		b = wire.AppendOp(b, op, flags)
	}
	return b
}

// Request is a decoded CPU request. A Write's Buf and a Read's length point
// into the message: the memory node executes the request before it reposts
// the buffer.
type Request struct {
	ID  uint32
	Ops []rdma.Op
}

// DecodeRequest parses a CPU request into r, reusing r.Ops. A Read's Buf
// is nil with ReadLen holding its length, in readLens.
func DecodeRequest(p []byte, r *Request, readLens *[]int) error {
	d := newDecoder(p)
	hdr := d.Take(msgHeader)
	if hdr == nil {
		return fmt.Errorf("%w: %v", rdma.ErrBadRequest, errShort)
	}
	if hdr[0] != msgMagic || hdr[1] != typeRequest {
		return fmt.Errorf("%w: %v (type %d)", rdma.ErrBadRequest, errMagic, hdr[1])
	}
	n := int(binary.LittleEndian.Uint16(hdr[2:]))
	r.ID = binary.LittleEndian.Uint32(hdr[4:])
	if n*opFixed > len(d.B) {
		return fmt.Errorf("%w: %d verbs in %d bytes", rdma.ErrBadRequest, n, len(d.B))
	}
	r.Ops = r.Ops[:0]
	*readLens = (*readLens)[:0]
	for i := 0; i < n; i++ {
		var op rdma.Op
		flags := wire.DecodeOpHeader(&d, &op)
		if flags&^flagWide != 0 {
			return fmt.Errorf("%w: verb %d has flags %#x", rdma.ErrBadRequest, i, flags)
		}
		op.Wide = flags&flagWide != 0
		if opRequestSize(&op) < 0 {
			return fmt.Errorf("%w: verb %d is %v, not a memory verb", rdma.ErrBadRequest, i, op.Verb)
		}
		readLen := int(wire.DecodeOperands(&d, &op))
		if op.Wide && (op.Verb == rdma.VerbRead || op.Verb == rdma.VerbWrite) {
			return fmt.Errorf("%w: verb %d: the 16-byte flag is for atomics", rdma.ErrBadRequest, i)
		}
		if readLen < 0 || readLen > MsgMax {
			return fmt.Errorf("%w: verb %d reads %d bytes", rdma.ErrBadRequest, i, readLen)
		}
		r.Ops = append(r.Ops, op)
		*readLens = append(*readLens, readLen)
	}
	if err := d.Done(trailing); err != nil {
		return fmt.Errorf("%w: %v", rdma.ErrBadRequest, err)
	}
	return nil
}

// replyReserve is the most a reply to ops can take.
func replyReserve(ops []rdma.Op) int {
	n := msgHeader
	for i := range ops {
		n += opReplySize(&ops[i])
	}
	return n
}

// appendReplyHeader starts a reply to request id with n results.
func appendReplyHeader(b []byte, id uint32, n int) []byte {
	b = append(b, msgMagic, typeReply)
	b = binary.LittleEndian.AppendUint16(b, uint16(n))
	return binary.LittleEndian.AppendUint32(b, id)
}

// appendResult appends one executed op's result: a Read's data, nothing for
// a Write, the old value for an atomic, or its error.
func appendResult(b []byte, op *rdma.Op) []byte {
	if op.Err != nil {
		b = append(b, statusError)
		return appendErr(b, op.Err)
	}
	return wire.AppendResult(b, op)
}

// appendRequestError answers request id with one error for all of it.
func appendRequestError(b []byte, id uint32, err error) []byte {
	b = append(b, msgMagic, typeError)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, id)
	return appendErr(b, err)
}

// replyID returns a reply's request id, so that it can be matched before
// it is decoded into the request's ops.
func replyID(p []byte) (uint32, error) {
	if len(p) < msgHeader {
		return 0, errShort
	}
	if p[0] != msgMagic || (p[1] != typeReply && p[1] != typeError) {
		return 0, errMagic
	}
	return binary.LittleEndian.Uint32(p[4:]), nil
}

// decodeReply fills the results of ops (the request's, in order) from p.
// It returns the request's error if the memory node failed it as a whole,
// and a decoding error if p does not answer ops.
func decodeReply(p []byte, ops []rdma.Op) (reqErr, err error) {
	d := newDecoder(p)
	hdr := d.Take(msgHeader)
	if hdr == nil || hdr[0] != msgMagic {
		return nil, errMagic
	}
	switch hdr[1] {
	case typeError:
		reqErr = decodeErr(&d)
		if err := d.Done(trailing); err != nil {
			return nil, err
		}
		return reqErr, nil
	case typeReply:
	default:
		return nil, fmt.Errorf("verbs: reply of type %d", hdr[1])
	}
	if n := int(binary.LittleEndian.Uint16(hdr[2:])); n != len(ops) {
		return nil, fmt.Errorf("verbs: %d results for %d verbs", n, len(ops))
	}
	for i := range ops {
		op := &ops[i]
		switch d.U8() {
		case statusOK:
			op.Err = nil
			wire.DecodeResult(&d, op)
		case statusError:
			op.Err = decodeErr(&d)
		default:
			return nil, fmt.Errorf("verbs: result %d has a bad status", i)
		}
		if d.Err != nil {
			return nil, d.Err
		}
	}
	return nil, d.Done(trailing)
}

// PeerData is a Send between members.
type PeerData struct {
	Seq      uint32
	From, To rdma.NodeID
	Target   rdma.Target
	Payload  rdma.Payload
}

const peerDataSize = 2 + 4 + 2 + 2 + 4 + rdma.PayloadSize

func (m *PeerData) encode(b []byte) []byte {
	b = append(b, msgMagic, typeData)
	b = binary.LittleEndian.AppendUint32(b, m.Seq)
	b = binary.LittleEndian.AppendUint16(b, uint16(m.From))
	b = binary.LittleEndian.AppendUint16(b, uint16(m.To))
	b = binary.LittleEndian.AppendUint32(b, uint32(m.Target))
	return append(b, m.Payload[:]...)
}

// PeerAck answers a PeerData: whether it reached the receive handler
// (Delivered), and the handler's error if it refused it, or why it did not
// reach the handler.
type PeerAck struct {
	Seq       uint32
	Delivered bool
	Err       error
}

func (m *PeerAck) encode(b []byte) []byte {
	b = append(b, msgMagic, typeAck)
	b = binary.LittleEndian.AppendUint32(b, m.Seq)
	var flags byte
	if m.Delivered {
		flags |= 1
	}
	if m.Err != nil {
		flags |= 2
	}
	b = append(b, flags)
	if m.Err != nil {
		b = appendErr(b, m.Err)
	}
	return b
}

// decodePeer parses a message on a queue pair between members: exactly
// one of the results is non-nil on success.
func decodePeer(p []byte) (*PeerData, *PeerAck, error) {
	d := newDecoder(p)
	if d.U8() != msgMagic {
		return nil, nil, errMagic
	}
	switch d.U8() {
	case typeData:
		m := &PeerData{Seq: d.U32(), From: rdma.NodeID(d.U16()), To: rdma.NodeID(d.U16()), Target: rdma.Target(d.U32())}
		copy(m.Payload[:], d.Take(rdma.PayloadSize))
		if err := d.Done(trailing); err != nil {
			return nil, nil, err
		}
		if m.Target > rdma.MaxTarget {
			return nil, nil, fmt.Errorf("verbs: target %#x out of range", m.Target)
		}
		return m, nil, nil
	case typeAck:
		m := &PeerAck{Seq: d.U32()}
		flags := d.U8()
		m.Delivered = flags&1 != 0
		if flags&2 != 0 {
			m.Err = decodeErr(&d)
		}
		if flags&^3 != 0 {
			return nil, nil, fmt.Errorf("verbs: ack flags %#x", flags)
		}
		if err := d.Done(trailing); err != nil {
			return nil, nil, err
		}
		return nil, m, nil
	}
	return nil, nil, errMagic
}

// Handshake kinds: the payloads of the tcpfab Sends that set up a queue
// pair from one member to another.
const (
	hsRequest = 1 // "connect to my queue pair": the initiator's QPInfo
	hsReply   = 2 // "connected; here is mine": the acceptor's QPInfo
	hsRefuse  = 3 // the acceptor could not set up a queue pair
	hsBye     = 4 // the sender is leaving: its queue pairs to you are gone
)

// handshake is one set-up message between members.
type handshake struct {
	Kind uint8
	ID   uint32
	QP   QPInfo
}

func (h handshake) payload() rdma.Payload {
	var p rdma.Payload
	p[0] = h.Kind
	binary.LittleEndian.PutUint32(p[1:], h.ID)
	binary.LittleEndian.PutUint32(p[5:], h.QP.QPN)
	binary.LittleEndian.PutUint32(p[9:], h.QP.PSN)
	copy(p[13:29], h.QP.GID[:])
	return p
}

func parseHandshake(p rdma.Payload) (handshake, error) {
	h := handshake{Kind: p[0], ID: binary.LittleEndian.Uint32(p[1:]),
		QP: QPInfo{QPN: binary.LittleEndian.Uint32(p[5:]), PSN: binary.LittleEndian.Uint32(p[9:])}}
	copy(h.QP.GID[:], p[13:29])
	if h.Kind < hsRequest || h.Kind > hsBye || p[29]|p[30]|p[31] != 0 {
		return handshake{}, fmt.Errorf("%w: bad verbs handshake (kind %d)", rdma.ErrBadRequest, h.Kind)
	}
	if h.QP.QPN >= 1<<24 || h.QP.PSN >= 1<<24 {
		return handshake{}, fmt.Errorf("%w: verbs handshake QPN %#x PSN %#x out of range", rdma.ErrBadRequest, h.QP.QPN, h.QP.PSN)
	}
	return h, nil
}

// HandshakeTarget is the Target that carries queue-pair set-up between
// members over tcpfab. Its generation byte is 0, which rdma.Inbox never
// hands out, and it is not shiftlock.ServiceTarget (0).
const HandshakeTarget rdma.Target = 0x00FFFF
