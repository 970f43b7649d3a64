package resp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"
)

// gnetFrontend serves on gnet event loops (loop.go has the logic). Per
// batch of pipelined commands it costs one read and one write, where a
// goroutine per connection costs Go's netpoller a failed read and a
// park/unpark per command.
type gnetFrontend struct {
	gnet.BuiltinEventEngine
	s      *Server
	eng    gnet.Engine
	booted chan bootResult
	exited chan struct{}

	// A stopped engine has closed its loops' eventfds, whose numbers the
	// kernel may hand to other files: a late Conn.Wake would write to
	// those. Wakes take wakeMu for reading; the shutdown sets stopping
	// under it before any loop stops.
	wakeMu   sync.RWMutex
	stopping bool

	bells sync.Map // gnet.EventLoop -> *loopBell, one doorbell per loop
}

// bell is the doorbell of the loop c belongs to. The loop rings it from
// its task queue, which gnet runs after the events of a pass: by then
// every connection that had input in the pass has started its atomics.
// The memory nodes' answers come back through the same queue.
func (f *gnetFrontend) bell(c gnet.Conn) *loopBell {
	el := c.EventLoop()
	if b, ok := f.bells.Load(el); ok {
		return b.(*loopBell)
	}
	b := f.s.newLoopBell(func(task func()) {
		err := el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			task()
			return nil
		}))
		if err != nil {
			// The engine is shutting down and the loop serves nobody any
			// more; the task still completes what the memory node
			// answered, so that no grant is left unadmitted.
			task()
		}
	})
	actual, _ := f.bells.LoadOrStore(el, b)
	return actual.(*loopBell)
}

type bootResult struct {
	addr net.Addr
	err  error
}

func newGnetFrontend(s *Server) *gnetFrontend {
	return &gnetFrontend{s: s, booted: make(chan bootResult, 1), exited: make(chan struct{})}
}

// listen starts gnet on addr and returns once it accepts connections.
func (f *gnetFrontend) listen(addr string) (net.Addr, error) {
	// gnet logs through our logger (its default writes to stdout, where the
	// proxy prints its address for whoever started it), and only warnings:
	// it reports every start at info level.
	glog := f.s.log.WithOptions(zap.IncreaseLevel(zap.WarnLevel)).Named("gnet").Sugar()
	opts := []gnet.Option{
		gnet.WithNumEventLoop(f.s.cfg.EventLoops),
		// As net.Listen does: a restarted proxy can bind its port while
		// connections of the previous one linger in TIME_WAIT. (Not
		// SO_REUSEPORT, which would let a second proxy share the port.)
		gnet.WithReuseAddr(true),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithTCPKeepAlive(max(f.s.cfg.KeepAlive, 0)),
		gnet.WithLogger(glog),
	}
	go func() {
		err := gnet.Run(f, "tcp://"+addr, opts...)
		// A failure to bind ends Run before OnBoot.
		select {
		case f.booted <- bootResult{err: fmt.Errorf("resp: listen %s: %w", addr, errOrShutdown(err))}:
		default:
		}
		f.s.stopped(err)
		close(f.exited)
	}()
	r := <-f.booted
	return r.addr, r.err
}

func errOrShutdown(err error) error {
	if err == nil {
		return errors.New("engine stopped")
	}
	return err
}

// OnBoot learns the bound address: gnet binds before it boots, but only
// names the address it was given, which may have port 0.
func (f *gnetFrontend) OnBoot(eng gnet.Engine) gnet.Action {
	f.eng = eng
	a, err := boundAddr(eng)
	if err != nil {
		f.booted <- bootResult{err: err}
		return gnet.Shutdown
	}
	f.booted <- bootResult{addr: a}
	return gnet.None
}

// boundAddr asks the kernel for the listening socket's address, through a
// duplicate of its descriptor.
func boundAddr(eng gnet.Engine) (net.Addr, error) {
	fd, err := eng.Dup()
	if err != nil {
		return nil, fmt.Errorf("resp: duplicating the listener: %w", err)
	}
	defer syscall.Close(fd)
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return nil, fmt.Errorf("resp: getsockname: %w", err)
	}
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]).To16(), Port: a.Port}, nil
	case *syscall.SockaddrInet6:
		ta := &net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}
		if a.ZoneId != 0 {
			if ifi, err := net.InterfaceByIndex(int(a.ZoneId)); err == nil {
				ta.Zone = ifi.Name
			}
		}
		return ta, nil
	}
	return nil, fmt.Errorf("resp: listener has an address of type %T", sa)
}

// close stops the engine, which closes every connection (OnClose), and
// waits until it has.
func (f *gnetFrontend) close() error {
	// Engine.Stop polls for the end every 500 ms; the end of Run says it
	// sooner. A cancelled context makes Stop start the shutdown and return.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = f.eng.Stop(ctx)
	<-f.exited
	return nil
}

// OnShutdown runs before gnet stops its loops, whatever the reason.
func (f *gnetFrontend) OnShutdown(gnet.Engine) {
	f.wakeMu.Lock()
	f.stopping = true
	f.wakeMu.Unlock()
	f.bells.Range(func(_, b any) bool {
		b.(*loopBell).d.Close() // its posting goroutines exit
		return true
	})
}

// kill closes c from any goroutine (CLIENT KILL, the idle sweep).
func (f *gnetFrontend) kill(c gnet.Conn) {
	f.wakeMu.RLock()
	defer f.wakeMu.RUnlock()
	if !f.stopping {
		_ = c.Close()
	}
}

func addrString(a net.Addr) string {
	if a == nil {
		return "?"
	}
	return a.String()
}

// wake has the loop run OnTraffic for c: a command of c's finished on its
// goroutine. After a shutdown the connection is closed and nobody waits.
func (f *gnetFrontend) wake(c gnet.Conn) {
	f.wakeMu.RLock()
	defer f.wakeMu.RUnlock()
	if !f.stopping {
		_ = c.Wake(nil)
	}
}

func (f *gnetFrontend) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	// Replies go out as soon as they are written (gnet sets this on the
	// listener too; Linux passes it on to accepted sockets, others may not).
	_ = c.SetNoDelay(true)
	lc, ok := f.s.openLoopConn(func() { f.wake(c) }, f.bell(c))
	if !ok {
		return []byte(f.s.refusal()), gnet.Close
	}
	c.SetContext(lc)
	f.s.register(lc.st, addrString(c.RemoteAddr()), addrString(c.LocalAddr()), func() { f.kill(c) })
	return nil, gnet.None
}

func (f *gnetFrontend) OnClose(c gnet.Conn, err error) gnet.Action {
	if lc, ok := c.Context().(*loopConn); ok {
		f.s.closeLoopConn(lc)
	}
	if err != nil {
		f.s.log.Debug("connection closed", zap.Stringer("remote", c.RemoteAddr()), zap.Error(err))
	}
	return gnet.None
}

func (f *gnetFrontend) OnTraffic(c gnet.Conn) gnet.Action {
	lc, ok := c.Context().(*loopConn)
	if !ok || f.s.onTraffic(lc, c) {
		return gnet.Close
	}
	return gnet.None
}
