package tcpfab

import (
	"context"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/shiftlock/shiftlock-proxy/memnode"
)

// emfileListener fails its first accepts as a process out of file
// descriptors does, then accepts as usual.
type emfileListener struct {
	net.Listener
	fail atomic.Int32
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.fail.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestServeOutlivesFailedAccepts: a memory node that runs out of file
// descriptors for a moment goes on serving once it has some again. Before,
// Serve returned on the first failed accept, and the memnode process exited
// with every lock in its table.
func TestServeOutlivesFailedAccepts(t *testing.T) {
	host := memnode.New(memnode.Config{Entries: 64, DeadAfter: time.Minute})
	t.Cleanup(host.Close)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &emfileListener{Listener: inner}
	ln.fail.Store(5)
	srv := NewServer(host, zaptest.NewLogger(t))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ep, err := Dial(ctx, inner.Addr().String(), Config{Name: "after-emfile"})
	if err != nil {
		select {
		case serr := <-done:
			t.Fatalf("Serve gave up after a failed accept: %v (dial: %v)", serr, err)
		default:
		}
		t.Fatal(err)
	}
	ep.Close()
	if n := srv.AcceptFailures(); n != 5 {
		t.Fatalf("%d failed accepts counted, want 5", n)
	}
	srv.Close()
	if err := <-done; err != ErrServerClosed {
		t.Fatalf("Serve returned %v after Close", err)
	}
}
