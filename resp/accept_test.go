package resp

import (
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// errListener fails its first accepts with errs, then hands out one end
// of a pipe, then says it is closed.
type errListener struct {
	errs []error
	conn net.Conn
}

func (l *errListener) Accept() (net.Conn, error) {
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		return nil, err
	}
	if c := l.conn; c != nil {
		l.conn = nil
		return c, nil
	}
	return nil, net.ErrClosed
}
func (l *errListener) Close() error   { return nil }
func (l *errListener) Addr() net.Addr { return &net.TCPAddr{} }

// TestAcceptLoopSurvivesErrors (issue 32, item 6): accepts that fail for
// want of descriptors neither end the accept loop (gnet's ended the
// process) nor spin it (redcon's retried at once): it pauses, logs once,
// counts every failure, and admits the next connection.
func TestAcceptLoopSurvivesErrors(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	s := New(Config{Logger: zap.New(core)})
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	mine, theirs := net.Pipe()
	defer mine.Close()
	defer theirs.Close()
	ln := &errListener{errs: []error{emfile, emfile, emfile, emfile}, conn: mine}
	var admitted []net.Conn
	start := time.Now()
	s.acceptLoop(ln, func(c net.Conn) { admitted = append(admitted, c) })
	if len(admitted) != 1 || admitted[0] != mine {
		t.Fatalf("admitted %v, want the one connection after the errors", admitted)
	}
	if n := s.AcceptFailures(); n != 4 {
		t.Fatalf("AcceptFailures = %d, want 4", n)
	}
	if n := logs.FilterMessageSnippet("accepting a client connection failed").Len(); n != 1 {
		t.Fatalf("%d log lines for 4 failures, want 1", n)
	}
	// Paused between tries, 5, 10, 20 and 40 ms: a lower bound that
	// time.Sleep guarantees, not a race.
	if d := time.Since(start); d < 75*time.Millisecond {
		t.Fatalf("4 failed accepts retried within %v: the loop spins", d)
	}
}
