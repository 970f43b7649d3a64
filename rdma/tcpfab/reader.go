package tcpfab

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"time"

	"go.uber.org/zap"
)

// The read side of an rpcConn is a leader/follower scheme. A waiting caller
// that finds the reader role free takes it, reads and dispatches replies
// (its own and others') until its own is in, then releases the role and
// hands it, through the baton, to a caller still waiting. A caller alone on
// the connection is therefore woken by the network poller directly, the way
// a blocking read is, instead of by a reader goroutine: on a small machine
// that handoff, and the idle processor it wakes, cost as much as the round
// trip itself. An idle reader takes the role only once calls have stopped,
// so that probes are answered and a dead connection is noticed while no
// caller is reading.

// idleDelay is how long calls must have stopped before the idle reader
// takes the role. It bounds how late a probe is answered on a connection
// that is busy but momentarily unread.
const idleDelay = 5 * time.Millisecond

// await waits until c is done, leading when the role is free. It returns
// nil once c is done, or ctx.Err() if ctx ends first (c may then still be
// pending).
func (rc *rpcConn) await(ctx context.Context, c *call) error {
	for {
		if rc.role.CompareAndSwap(false, true) {
			err := rc.lead(ctx, c)
			rc.release()
			return err
		}
		select {
		case <-c.done:
			return nil
		case <-rc.baton:
			// Offered the role: try to take it; whoever beat us to it
			// passes it on when done.
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// lead reads until c is done. The caller holds the role.
func (rc *rpcConn) lead(ctx context.Context, c *call) error {
	if ctx.Done() != nil {
		// A blocked read does not watch ctx; a past read deadline
		// interrupts it.
		stop := context.AfterFunc(ctx, rc.interrupt)
		defer stop()
	}
	woke := int32(0)
	for {
		select {
		case <-c.done:
			woke += rc.drain()
			rc.woke.Store(woke)
			return nil
		default:
		}
		h, body, err := rc.fr.next()
		if err == nil {
			err = rc.dispatch(h, body)
			woke++
		}
		if err == nil {
			continue
		}
		if rc.interrupted(err) {
			if err := ctx.Err(); err != nil {
				return err
			}
			continue
		}
		rc.readFailed(err)
		<-c.done // fail, or whoever took c, completes it
		return nil
	}
}

// drain dispatches the replies already buffered: they cost no system call
// and would otherwise wait for the next leader.
func (rc *rpcConn) drain() (n int32) {
	for rc.fr.complete() {
		h, body, err := rc.fr.next()
		if err == nil {
			err = rc.dispatch(h, body)
		}
		if err != nil {
			rc.readFailed(err)
			return n
		}
		n++
	}
	return n
}

// release frees the role and offers it to a waiting caller, if any. The
// role is freed before the calls are counted, and callers register before
// trying to take it, so a caller never waits with nobody reading.
func (rc *rpcConn) release() {
	rc.role.Store(false)
	rc.mu.Lock()
	waiting := len(rc.calls) > 0
	rc.mu.Unlock()
	if waiting {
		select {
		case rc.baton <- struct{}{}:
		default:
		}
	}
}

// interrupt makes the current (or next) read return at once.
func (rc *rpcConn) interrupt() {
	rc.kicked.Store(true)
	_ = rc.c.SetReadDeadline(time.Unix(1, 0))
}

// interrupted reports whether err is an interrupt, and clears it. Whoever
// interrupts sets its condition first, so a reader that re-checks after
// clearing cannot miss it.
func (rc *rpcConn) interrupted(err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) || !rc.kicked.Swap(false) {
		return false
	}
	_ = rc.c.SetReadDeadline(time.Time{})
	return true
}

func (rc *rpcConn) readFailed(err error) {
	rc.mu.Lock()
	already := rc.err != nil
	rc.mu.Unlock()
	if !already && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		rc.log.Warn("tcpfab: closing connection", zap.String("peer", rc.what), zap.Error(err))
	}
	rc.fail(rc.unreachable(err))
}

// idleReader reads while no caller does, so that an idle connection still
// answers probes and notices that its far end is gone. It stays away while
// calls come and go: holding the role then would make every caller wait
// for a handoff from it.
func (rc *rpcConn) idleReader() {
	defer close(rc.exited)
	t := time.NewTimer(idleDelay)
	defer t.Stop()
	for {
		seen := rc.activity.Load()
		select {
		case <-rc.broken:
			return
		case <-t.C:
		}
		t.Reset(idleDelay)
		if rc.activity.Load() != seen || !rc.role.CompareAndSwap(false, true) {
			continue
		}
		rc.readWhileIdle(seen)
		rc.release()
	}
}

// readWhileIdle reads until the connection fails or calls resume.
func (rc *rpcConn) readWhileIdle(seen uint64) {
	for {
		h, body, err := rc.fr.next()
		if err == nil {
			err = rc.dispatch(h, body)
		}
		if err != nil {
			if rc.interrupted(err) {
				if rc.activity.Load() != seen {
					return
				}
				continue
			}
			rc.readFailed(err)
			return
		}
		if rc.activity.Load() != seen && !rc.fr.complete() {
			return
		}
	}
}
