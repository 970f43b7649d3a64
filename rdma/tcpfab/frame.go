package tcpfab

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/internal/wire"
)

// Frame header layout; see PROTOCOL.md.
const (
	headerSize = 12
	magic      = 0xA7

	// MaxFrame bounds a frame body. It caps what one bad peer can make a
	// server buffer, and so also the size of a Read, a Write or a Batch.
	MaxFrame = 1 << 20
)

// Frame types. Replies set the high bit of their request's type.
const (
	tJoin    uint8 = 0x01
	tLeave   uint8 = 0x02
	tPeers   uint8 = 0x03
	tRecover uint8 = 0x04
	tVerb    uint8 = 0x05
	tBatch   uint8 = 0x06
	// tProbeReply answers a server-initiated tProbe, carrying its id.
	tProbeReply uint8 = 0x07
	// tRange is a range-lock name's control call (rdma.RangeRequest).
	tRange uint8 = 0x08
	// tAttach carries another fabric's connection set-up (rdma/verbs:
	// queue pair numbers, GIDs, remote keys) over this authenticated
	// control connection; the server hands its body to Server.OnAttach.
	tAttach uint8 = 0x09
	// tSend travels only between nodes, on the peer port.
	tSend uint8 = 0x10

	replyBit = 0x80

	tJoinReply    = tJoin | replyBit
	tLeaveReply   = tLeave | replyBit
	tPeersReply   = tPeers | replyBit
	tRecoverReply = tRecover | replyBit
	tRangeReply   = tRange | replyBit
	tVerbReply    = tVerb | replyBit
	tBatchReply   = tBatch | replyBit
	tAttachReply  = tAttach | replyBit
	// tProbe is the memory node asking a member about an entry.
	tProbe    = tProbeReply | replyBit
	tSendAck  = tSend | replyBit
	tError    = 0xFF // a request failed as a whole
	maxBatch  = 1<<16 - 1
	maxString = 1<<16 - 1
)

type header struct {
	Len   uint32
	Type  uint8
	Count uint16
	ID    uint32
}

func appendHeader(b []byte, h header) []byte {
	b = binary.LittleEndian.AppendUint32(b, h.Len)
	b = append(b, magic, h.Type)
	b = binary.LittleEndian.AppendUint16(b, h.Count)
	return binary.LittleEndian.AppendUint32(b, h.ID)
}

// errStream is a framing error: the byte stream cannot be trusted past it, so
// the connection is closed.
var errStream = errors.New("tcpfab: bad stream")

func decodeHeader(p []byte) (header, error) {
	if len(p) < headerSize {
		return header{}, fmt.Errorf("%w: short header", errStream)
	}
	if p[4] != magic {
		if string(p[:len(authPreamble)]) == authPreamble {
			return header{}, fmt.Errorf("%w: the far end requires fabric authentication (set fabric_secret_file to its secret)", errStream)
		}
		return header{}, fmt.Errorf("%w: bad magic %#02x", errStream, p[4])
	}
	h := header{
		Len:   binary.LittleEndian.Uint32(p[0:]),
		Type:  p[5],
		Count: binary.LittleEndian.Uint16(p[6:]),
		ID:    binary.LittleEndian.Uint32(p[8:]),
	}
	if h.Len > MaxFrame {
		return header{}, fmt.Errorf("%w: frame of %d bytes exceeds the %d-byte limit", errStream, h.Len, MaxFrame)
	}
	return h, nil
}

// beginFrame appends a header with a length to be filled in by endFrame, so
// a body can be encoded in place without knowing its size first.
func beginFrame(b []byte, typ uint8, count uint16, id uint32) ([]byte, int) {
	return appendHeader(b, header{Type: typ, Count: count, ID: id}), len(b)
}

func endFrame(b []byte, start int) []byte {
	binary.LittleEndian.PutUint32(b[start:], uint32(len(b)-start-headerSize))
	return b
}

// frameReader yields frames from a buffered stream. A body is valid until the
// next call to next; bodies that fit the read buffer are not copied out of
// it. A read that fails with a timeout (an interrupt) consumes nothing, so
// next can be called again.
type frameReader struct {
	r       *bufio.Reader
	discard int // the previous frame, still in the buffer
	scratch []byte

	// A body too big for the buffer, being read into scratch.
	big    bool
	bigHdr header
	got    int
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10)}
}

func (fr *frameReader) next() (header, []byte, error) {
	if fr.discard > 0 {
		_, _ = fr.r.Discard(fr.discard)
		fr.discard = 0
	}
	if fr.big {
		return fr.readBig()
	}
	hb, err := fr.r.Peek(headerSize)
	if err != nil {
		return header{}, nil, midFrame(err, fr.r.Buffered())
	}
	h, err := decodeHeader(hb)
	if err != nil {
		return header{}, nil, err
	}
	total := headerSize + int(h.Len)
	if total <= fr.r.Size() {
		p, err := fr.r.Peek(total)
		if err != nil {
			return header{}, nil, midFrame(err, 1)
		}
		fr.discard = total
		return h, p[headerSize:], nil
	}
	_, _ = fr.r.Discard(headerSize)
	if cap(fr.scratch) < int(h.Len) {
		fr.scratch = make([]byte, h.Len)
	}
	fr.big, fr.bigHdr, fr.got = true, h, 0
	return fr.readBig()
}

func (fr *frameReader) readBig() (header, []byte, error) {
	body := fr.scratch[:fr.bigHdr.Len]
	n, err := io.ReadFull(fr.r, body[fr.got:])
	fr.got += n
	if err != nil {
		return header{}, nil, midFrame(err, 1)
	}
	fr.big = false
	return fr.bigHdr, body, nil
}

// complete reports whether a whole frame (or a framing error) is buffered,
// so that next will not block.
func (fr *frameReader) complete() bool {
	if fr.discard > 0 {
		_, _ = fr.r.Discard(fr.discard)
		fr.discard = 0
	}
	if fr.big || fr.r.Buffered() < headerSize {
		return false
	}
	hb, _ := fr.r.Peek(headerSize)
	h, err := decodeHeader(hb)
	return err != nil || fr.r.Buffered() >= headerSize+int(h.Len)
}

// buffered reports whether more input is buffered: the server's signal that
// it is not yet time to flush replies.
func (fr *frameReader) buffered() bool { return fr.r.Buffered() > fr.discard }

// midFrame turns an EOF inside a frame into ErrUnexpectedEOF; an EOF
// between frames is a clean close.
func midFrame(err error, buffered int) error {
	if err == io.EOF && buffered > 0 {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Errors cross the wire as a bit set of the rdma sentinels they match plus
// their text, so errors.Is works on the receiving side for every sentinel the
// sender's error wrapped (a fenced node's error is both ErrUnreachable and
// ErrFenced).
var sentinels = [...]error{
	rdma.ErrUnreachable,
	rdma.ErrNotReady,
	rdma.ErrClosed,
	rdma.ErrUnknownRegion,
	rdma.ErrOutOfBounds,
	rdma.ErrMisaligned,
	rdma.ErrUnavailable,
	rdma.ErrBadRequest,
	rdma.ErrFenced,
}

func errMask(err error) uint16 {
	var m uint16
	for i, s := range sentinels {
		if errors.Is(err, s) {
			m |= 1 << i
		}
	}
	return m
}

// remoteError is an error decoded from the wire.
type remoteError struct {
	mask uint16
	msg  string
}

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Unwrap() []error {
	var errs []error
	for i, s := range sentinels {
		if e.mask&(1<<i) != 0 {
			errs = append(errs, s)
		}
	}
	return errs
}

// appendError encodes err with at most limit bytes of its text.
func appendError(b []byte, err error, limit int) []byte {
	msg := err.Error()
	limit = min(limit, maxString)
	if len(msg) > limit {
		msg = msg[:max(limit, 0)]
	}
	b = binary.LittleEndian.AppendUint16(b, errMask(err))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(msg)))
	return append(b, msg...)
}

func decodeError(d *wire.Decoder) error {
	mask := d.U16()
	msg := d.Str()
	if d.Err != nil {
		return d.Err
	}
	if msg == "" {
		// The sender trimmed the text to fit its reply budget; the sentinels
		// still say what went wrong.
		msg = "tcpfab: remote error"
		for i, s := range sentinels {
			if mask&(1<<i) != 0 {
				msg = s.Error()
				break
			}
		}
	}
	return &remoteError{mask: mask, msg: msg}
}

// newDecoder reads a frame body (wire.Decoder); a short read is a bad
// request.
func newDecoder(body []byte) wire.Decoder { return wire.Decoder{B: body, Short: errShort} }

var errShort = fmt.Errorf("%w: truncated body", rdma.ErrBadRequest)

// trailing fails a body with bytes left over: a body must be exactly its
// contents.
func trailing(n int) error { return fmt.Errorf("%w: %d trailing bytes", rdma.ErrBadRequest, n) }
