package resp

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// hangups notices clients that close their connection while a command of
// theirs is queued for a lock (docs/shiftlock.md: such a waiter finishes in the
// background and releases at once, rather than keep a lock nobody will
// release for its whole TTL).
//
// One goroutine peeks at every waiting connection's socket every tick,
// without consuming anything and without blocking: redcon's reader is parked
// in our handler, pipelined commands must stay in the kernel buffer for it,
// and a grant must be answered without waiting on any watcher. Zero bytes
// on a readable socket means the client hung up.
type hangups struct {
	mu      sync.Mutex
	waiting map[*hangupWatch]struct{}
	wake    chan struct{}
}

type hangupWatch struct {
	raw    syscall.RawConn
	cancel context.CancelFunc
}

const hangupTick = 10 * time.Millisecond

// watch returns a context that ends if c's client hangs up, until stop.
func (h *hangups) watch(parent context.Context, c net.Conn) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	if tc, ok := c.(*tls.Conn); ok {
		// A hang-up shows on the TCP socket under TLS all the same.
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return ctx, cancel
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return ctx, cancel
	}
	w := &hangupWatch{raw: raw, cancel: cancel}
	h.mu.Lock()
	if h.waiting == nil {
		h.waiting = map[*hangupWatch]struct{}{}
		h.wake = make(chan struct{}, 1)
		go h.loop()
	}
	h.waiting[w] = struct{}{}
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
	return ctx, func() {
		h.mu.Lock()
		delete(h.waiting, w)
		h.mu.Unlock()
		cancel()
	}
}

func (h *hangups) loop() {
	t := time.NewTicker(hangupTick)
	defer t.Stop()
	var buf [1]byte
	for {
		h.mu.Lock()
		idle := len(h.waiting) == 0
		ws := make([]*hangupWatch, 0, len(h.waiting))
		for w := range h.waiting {
			ws = append(ws, w)
		}
		h.mu.Unlock()
		if idle {
			<-h.wake
			continue
		}
		for _, w := range ws {
			gone := false
			_ = w.raw.Control(func(fd uintptr) {
				n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
				gone = (err == nil && n == 0) || (err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EINTR))
			})
			if gone {
				w.cancel()
			}
		}
		<-t.C
	}
}
