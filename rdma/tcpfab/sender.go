package tcpfab

import (
	"net"
	"sync"
)

// sender coalesces frames from many goroutines into few writes. Frames are
// encoded straight into a shared buffer under mu; whoever flushes while no
// flush is running becomes the flusher and writes until the buffer stays
// empty. With one verb outstanding the caller writes its own frame at once;
// with many, the frames queued during one write go out together in the next,
// so syscalls per verb fall as load rises.
type sender struct {
	conn net.Conn

	mu       sync.Mutex
	buf      []byte
	spare    []byte
	flushing bool
	flushed  *sync.Cond // signalled when a flush ends
	err      error
}

func newSender(c net.Conn) *sender {
	s := &sender{conn: c, buf: make([]byte, 0, 16<<10), spare: make([]byte, 0, 16<<10)}
	s.flushed = sync.NewCond(&s.mu)
	return s
}

// lock returns the buffer to append frames to; unlock stores it back.
func (s *sender) lock() ([]byte, error) {
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, err
	}
	return s.buf, nil
}

func (s *sender) unlock(b []byte) {
	s.buf = b
	s.mu.Unlock()
}

// flush writes everything queued, unless another goroutine is already
// flushing, in which case that one writes it. A write error is sticky: the
// connection is unusable after it, and the caller closes it.
func (s *sender) flush() error {
	s.mu.Lock()
	if s.flushing {
		s.mu.Unlock()
		return nil
	}
	s.flushing = true
	for len(s.buf) > 0 && s.err == nil {
		b := s.buf
		s.buf = s.spare[:0]
		s.mu.Unlock()
		_, err := s.conn.Write(b)
		s.mu.Lock()
		if err != nil {
			s.err = err
		}
		// Give a buffer that grew for a big frame back to the allocator.
		if cap(b) > 4*MaxFrame {
			b = make([]byte, 0, 16<<10)
		}
		s.spare = b[:0]
	}
	s.flushing = false
	s.flushed.Broadcast()
	err := s.err
	s.mu.Unlock()
	return err
}

// drain is flush for a producer that must not run ahead of the socket:
// if another goroutine is flushing, it waits for that flush to end (a peer
// that does not read blocks it) and then writes what is queued itself.
func (s *sender) drain() error {
	s.mu.Lock()
	for s.flushing && s.err == nil {
		s.flushed.Wait()
	}
	s.mu.Unlock()
	return s.flush()
}

// fail makes every later send fail with err.
func (s *sender) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

// queued is the number of bytes waiting to be written.
func (s *sender) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buf)
}
