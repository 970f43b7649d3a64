package resp

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"
)

// watchHangup returns a context that ends when the client closes its side of
// the connection, for the time a command is queued for a lock (DESIGN §3: a
// waiter whose client is gone finishes in the background and releases at
// once, instead of keeping a lock nobody will release for its whole TTL).
//
// It peeks at the socket without consuming anything: redcon's reader is
// parked in our handler, and pipelined commands must stay in the kernel
// buffer for it. A readable socket with data means the client is alive and
// has more to say; zero bytes means it hung up.
func watchHangup(parent context.Context, c net.Conn) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return ctx, cancel
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return ctx, cancel
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var buf [1]byte
		err := raw.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if errors.Is(err, syscall.EAGAIN) {
				return false // nothing yet: wait for readability
			}
			if err == nil && n == 0 {
				cancel() // orderly shutdown by the client
			}
			return true
		})
		if err != nil && !errors.Is(err, context.Canceled) {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				cancel() // reset or closed: the client is gone either way
			}
		}
	}()
	stop := func() {
		cancel()
		// Wake the peek and give the socket back to redcon unchanged.
		_ = tc.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = tc.SetReadDeadline(time.Time{})
	}
	return ctx, stop
}
