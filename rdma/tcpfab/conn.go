package tcpfab

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
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
	// deadline (Unix ns, 0 for none) is when expire gives up on the call.
	deadline int64

	// Request. op doubles as the single verb's result; a Read's op.Buf is
	// the caller's buffer, filled by whoever reads the reply.
	op    rdma.Op
	batch *rdma.Batch
	wire  int    // the batch's verbs that go on the wire
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

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func getCall(typ uint8) *call {
	c := callPool.Get().(*call)
	c.typ = typ
	return c
}

func putCall(c *call) {
	c.op = rdma.Op{}
	c.batch, c.wire = nil, 0
	c.req = nil
	c.body = c.body[:0]
	c.delivered, c.sendErr, c.err = false, nil, nil
	c.deadline = 0
	callPool.Put(c)
}

// rpcConn is the initiating side of a connection: to the memory node, or to
// a peer for Sends. Requests from any goroutine are pipelined and matched to
// replies by id. Replies are read by whichever waiting caller holds the
// reader role (see reader.go), so that a caller alone on the connection is
// woken by the network poller itself, as a plain blocking read would be.
type rpcConn struct {
	c    net.Conn
	s    *sender
	fr   *frameReader // used only by the reader-role holder
	what string       // names the far end in errors
	log  *zap.Logger

	// unsolicited handles frames the far end starts (probes). It runs on
	// the reading goroutine and must not block.
	unsolicited func(h header, body []byte) error

	mu     sync.Mutex
	calls  map[uint32]*call
	next   uint32
	err    error
	broken chan struct{}
	exited chan struct{} // the idle reader has returned

	flushNow chan struct{} // wakes the writer goroutine

	role     atomic.Bool   // someone is reading
	baton    chan struct{} // offers the free role to a waiting caller
	activity atomic.Uint64 // bumped by every call; tells the idle reader to stay away
	kicked   atomic.Bool   // a read deadline was set to interrupt the reader
	woke     atomic.Int32  // calls the last leader completed
}

func newRPCConn(c net.Conn, what string, log *zap.Logger) *rpcConn {
	return &rpcConn{
		c: c, s: newSender(c), fr: newFrameReader(c), what: what, log: log,
		calls: make(map[uint32]*call), broken: make(chan struct{}), exited: make(chan struct{}),
		flushNow: make(chan struct{}, 1), baton: make(chan struct{}, 1),
	}
}

// maxYields bounds how long the writer waits for more frames.
const maxYields = 8

func (rc *rpcConn) start() {
	go rc.idleReader()
	go rc.writeLoop()
}

// writeLoop flushes on behalf of callers that are not alone on the
// connection. It yields before writing, for as long as the callers just
// woken by replies keep queueing their next requests, so that one write
// carries them all: under load, syscalls per verb fall instead of staying
// at one. (Measured at 64 in flight: about 20 frames per write with a
// single yield, 30 to 45 with this.)
func (rc *rpcConn) writeLoop() {
	for {
		select {
		case <-rc.flushNow:
		case <-rc.broken:
			return
		}
		for i, n := 0, rc.s.queued(); i < maxYields; i++ {
			runtime.Gosched()
			m := rc.s.queued()
			if m == n {
				break
			}
			n = m
		}
		if err := rc.s.flush(); err != nil {
			rc.fail(rc.unreachable(err))
			return
		}
	}
}

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

// do sends c and waits for its reply. On return, c holds the reply and is
// no longer referenced by the connection; the returned error is a transport
// failure or a cancellation (c.err holds the request's own failure, or a
// timeout). timeout applies when ctx has no deadline; expire enforces it.
func (rc *rpcConn) do(ctx context.Context, c *call, timeout time.Duration) error {
	if _, ok := ctx.Deadline(); !ok && timeout > 0 {
		c.deadline = time.Now().Add(timeout).UnixNano()
	}
	rc.activity.Add(1)
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
	// Alone means nobody else is about to send either: the last reader
	// woke no one but itself.
	alone := len(rc.calls) == 1 && rc.woke.Load() <= 1
	rc.mu.Unlock()

	b, err := rc.s.lock()
	if err == nil {
		b = appendRequest(b, c)
		rc.s.unlock(b)
		if alone {
			// Nobody else is about to send: write now, the lowest latency.
			err = rc.s.flush()
		} else {
			select {
			case rc.flushNow <- struct{}{}:
			default: // already signalled; that flush takes this frame too
			}
		}
	}
	if err != nil {
		// The connection is dead; fail delivers our token too.
		rc.fail(rc.unreachable(err))
		<-c.done
		return c.err
	}
	if err := rc.await(ctx, c); err == nil {
		return nil
	}
	rc.mu.Lock()
	_, pending := rc.calls[c.id]
	delete(rc.calls, c.id)
	rc.mu.Unlock()
	if pending {
		return ctx.Err()
	}
	// A reader already owns the call and is filling it in: its reply is the
	// truth about what happened, so wait the moment it takes.
	<-c.done
	return nil
}

// expire fails the calls whose deadline has passed. A periodic sweep
// instead of a timer per call keeps timers (and the scheduler work they
// cause) off the verb path; a timeout fires up to one sweep late.
func (rc *rpcConn) expire(now time.Time) {
	ns := now.UnixNano()
	var late []*call
	rc.mu.Lock()
	for id, c := range rc.calls {
		if c.deadline != 0 && ns > c.deadline {
			delete(rc.calls, id)
			late = append(late, c)
		}
	}
	rc.mu.Unlock()
	for _, c := range late {
		c.err = fmt.Errorf("%w: %s: no reply in time", rdma.ErrUnreachable, rc.what)
		c.done <- struct{}{}
	}
	if len(late) > 0 && rc.role.Load() {
		rc.interrupt() // the reader may be one of them, blocked in a read
	}
}

func appendRequest(b []byte, c *call) []byte {
	switch c.typ {
	case tVerb:
		b, at := beginFrame(b, tVerb, 1, c.id)
		return endFrame(appendOp(b, &c.op), at)
	case tBatch:
		b, at := beginFrame(b, tBatch, uint16(c.wire), c.id)
		for i := range c.batch.Ops {
			if opReqSize(&c.batch.Ops[i]) >= 0 {
				b = appendOp(b, &c.batch.Ops[i])
			}
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
	d := newDecoder(body)
	if h.Type == tError {
		c.err = decodeError(&d)
		return d.Done(trailing)
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
		if int(h.Count) != c.wire {
			return fmt.Errorf("%d results for %d verbs", h.Count, c.wire)
		}
		for i := range c.batch.Ops {
			op := &c.batch.Ops[i]
			if opReqSize(op) < 0 {
				op.Err = fmt.Errorf("%w: verb %v is not a memory verb", rdma.ErrBadRequest, op.Verb)
				continue
			}
			if err := decodeOpResult(&d, op); err != nil {
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
	return d.Done(trailing)
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
