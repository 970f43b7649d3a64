package tcpfab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// call is one outstanding request on an rpcConn. Calls are pooled: the hot
// path allocates nothing.
type call struct {
	id   uint32
	typ  uint8
	done chan struct{} // receives one token when the reply is in
	tmr  *time.Timer

	// Request. op doubles as the single verb's result; a Read's op.Buf is
	// the caller's buffer, filled by the reader goroutine.
	op    rdma.Op
	batch *rdma.Batch
	req   []byte // pre-encoded control body
	send  struct {
		from, to rdma.NodeID
		target   rdma.Target
		payload  rdma.Payload
	}

	// Reply.
	body      []byte // control reply body, copied
	delivered bool   // the Send reached the receive handler
	sendErr   error  // the receive side's answer to a Send
	err       error  // the request failed as a whole
}

var callPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &call{done: make(chan struct{}, 1), tmr: t}
}}

func getCall(typ uint8) *call {
	c := callPool.Get().(*call)
	c.typ = typ
	return c
}

func putCall(c *call) {
	c.op = rdma.Op{}
	c.batch = nil
	c.req = nil
	c.body = c.body[:0]
	c.delivered, c.sendErr, c.err = false, nil, nil
	callPool.Put(c)
}

// rpcConn is the initiating side of a connection: to the memory node, or to
// a peer for Sends. Requests from any goroutine are pipelined and matched to
// replies by id on one reader goroutine.
type rpcConn struct {
	c    net.Conn
	s    *sender
	what string // names the far end in errors
	log  *zap.Logger

	// unsolicited handles frames the far end starts (probes). It runs on
	// the reader goroutine and must not block.
	unsolicited func(h header, body []byte) error

	mu     sync.Mutex
	calls  map[uint32]*call
	next   uint32
	err    error
	broken chan struct{}
	exited chan struct{}
}

func newRPCConn(c net.Conn, what string, log *zap.Logger) *rpcConn {
	return &rpcConn{
		c: c, s: newSender(c), what: what, log: log,
		calls: make(map[uint32]*call), broken: make(chan struct{}), exited: make(chan struct{}),
	}
}

func (rc *rpcConn) start() { go rc.readLoop() }

// fail breaks the connection: every pending and later call fails with err.
// The first error wins.
func (rc *rpcConn) fail(err error) {
	rc.mu.Lock()
	if rc.err != nil {
		rc.mu.Unlock()
		return
	}
	rc.err = err
	close(rc.broken)
	calls := rc.calls
	rc.calls = make(map[uint32]*call)
	rc.mu.Unlock()
	rc.s.fail(err)
	_ = rc.c.Close()
	for _, c := range calls {
		c.err = err
		c.done <- struct{}{}
	}
}

func (rc *rpcConn) isBroken() bool {
	select {
	case <-rc.broken:
		return true
	default:
		return false
	}
}

func (rc *rpcConn) unreachable(err error) error {
	return fmt.Errorf("%w: %s: %v", rdma.ErrUnreachable, rc.what, err)
}

// do sends c and waits for its reply. On return, c holds the reply; the
// returned error is a transport failure, a cancellation or a timeout (it
// does not include c.err). timeout applies when ctx has no deadline.
func (rc *rpcConn) do(ctx context.Context, c *call, timeout time.Duration) error {
	rc.mu.Lock()
	if rc.err != nil {
		err := rc.err
		rc.mu.Unlock()
		return err
	}
	rc.next++
	for rc.calls[rc.next] != nil {
		rc.next++
	}
	c.id = rc.next
	rc.calls[c.id] = c
	rc.mu.Unlock()

	b, err := rc.s.lock()
	if err == nil {
		b = appendRequest(b, c)
		rc.s.unlock(b)
		err = rc.s.flush()
	}
	if err != nil {
		// The connection is dead; fail delivers our token too.
		rc.fail(rc.unreachable(err))
		<-c.done
		return c.err
	}

	var expire <-chan time.Time
	if _, ok := ctx.Deadline(); !ok && timeout > 0 {
		c.tmr.Reset(timeout)
		expire = c.tmr.C
	}
	select {
	case <-c.done:
		if expire != nil {
			c.tmr.Stop()
		}
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-expire:
		err = fmt.Errorf("%w: %s: no reply within %v", rdma.ErrUnreachable, rc.what, timeout)
	}
	if expire != nil {
		c.tmr.Stop()
	}
	rc.mu.Lock()
	_, pending := rc.calls[c.id]
	delete(rc.calls, c.id)
	rc.mu.Unlock()
	if pending {
		return err
	}
	// The reader already owns the call and is filling it in: its reply is
	// the truth about what happened, so wait the moment it takes.
	<-c.done
	return nil
}

func appendRequest(b []byte, c *call) []byte {
	switch c.typ {
	case tVerb:
		b, at := beginFrame(b, tVerb, 1, c.id)
		return endFrame(appendOp(b, &c.op), at)
	case tBatch:
		b, at := beginFrame(b, tBatch, uint16(len(c.batch.Ops)), c.id)
		for i := range c.batch.Ops {
			b = appendOp(b, &c.batch.Ops[i])
		}
		return endFrame(b, at)
	case tSend:
		b = appendHeader(b, header{Len: sendBodySize, Type: tSend, ID: c.id})
		return appendSend(b, c.send.from, c.send.to, c.send.target, &c.send.payload)
	default:
		b = appendHeader(b, header{Len: uint32(len(c.req)), Type: c.typ, ID: c.id})
		return append(b, c.req...)
	}
}

func (rc *rpcConn) readLoop() {
	defer close(rc.exited)
	fr := newFrameReader(rc.c)
	for {
		h, body, err := fr.next()
		if err == nil {
			err = rc.dispatch(h, body)
		}
		if err != nil {
			rc.mu.Lock()
			already := rc.err != nil
			rc.mu.Unlock()
			if !already && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				rc.log.Warn("tcpfab: closing connection", zap.String("peer", rc.what), zap.Error(err))
			}
			rc.fail(rc.unreachable(err))
			return
		}
	}
}

// dispatch completes the call a reply belongs to. Only a malformed reply is
// an error: replies to abandoned calls are normal and skipped.
func (rc *rpcConn) dispatch(h header, body []byte) error {
	if h.Type&replyBit == 0 || h.Type == tProbe {
		if rc.unsolicited == nil {
			return fmt.Errorf("%w: unexpected frame type %#02x", errStream, h.Type)
		}
		return rc.unsolicited(h, body)
	}
	rc.mu.Lock()
	c := rc.calls[h.ID]
	delete(rc.calls, h.ID)
	rc.mu.Unlock()
	if c == nil {
		return nil
	}
	err := decodeReply(c, h, body)
	if err != nil {
		err = fmt.Errorf("%w: reply to %#02x: %v", errStream, c.typ, err)
		c.err = rc.unreachable(err)
	}
	c.done <- struct{}{}
	return err
}

func decodeReply(c *call, h header, body []byte) error {
	d := decoder{b: body}
	if h.Type == tError {
		c.err = decodeError(&d)
		return d.done()
	}
	if h.Type != c.typ|replyBit {
		return fmt.Errorf("reply type %#02x", h.Type)
	}
	switch c.typ {
	case tVerb:
		if h.Count != 1 {
			return fmt.Errorf("%d results for one verb", h.Count)
		}
		if err := decodeOpResult(&d, &c.op); err != nil {
			return err
		}
	case tBatch:
		if int(h.Count) != len(c.batch.Ops) {
			return fmt.Errorf("%d results for %d verbs", h.Count, len(c.batch.Ops))
		}
		for i := range c.batch.Ops {
			if err := decodeOpResult(&d, &c.batch.Ops[i]); err != nil {
				return err
			}
		}
	case tSend:
		var err error
		c.delivered, c.sendErr, err = decodeSendAck(body)
		return err
	default:
		c.body = append(c.body[:0], body...)
		return nil
	}
	return d.done()
}

// reply sends a frame that answers one the far end started (a probe).
func (rc *rpcConn) reply(typ uint8, id uint32, body []byte) {
	b, err := rc.s.lock()
	if err != nil {
		return
	}
	b = appendHeader(b, header{Len: uint32(len(body)), Type: typ, ID: id})
	rc.s.unlock(append(b, body...))
	if err := rc.s.flush(); err != nil {
		rc.fail(rc.unreachable(err))
	}
}
