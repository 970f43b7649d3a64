package resp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

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
	booted chan error
	exited chan struct{}
	// ln is the client port; accepted is closed when its accept loop has
	// ended. enrolling is a semaphore of maxEnrolling.
	ln        net.Listener
	accepted  chan struct{}
	enrolling chan struct{}
	startOnce sync.Once

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

func newGnetFrontend(s *Server) *gnetFrontend {
	return &gnetFrontend{s: s, booted: make(chan error, 1), exited: make(chan struct{}),
		accepted: make(chan struct{}), enrolling: make(chan struct{}, maxEnrolling)}
}

// listen binds addr, starts gnet and accepts in the background. The
// accepting is not gnet's: its accept loop ends the engine, and with it the
// process, the first time accept fails for want of a descriptor (issue 32).
// acceptLoop never gives up, and hands each admitted connection to an event
// loop (Engine.Register). gnet will not run without a listener of its own,
// so it gets a Unix socket in a private directory, removed once it is
// bound: nobody can connect to it.
func (f *gnetFrontend) listen(addr string) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "shiftlock-gnet-")
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("resp: a private directory for gnet's unused socket (set TMPDIR to a writable one): %w", err)
	}
	// gnet logs through our logger (its default writes to stdout, where the
	// proxy prints its address for whoever started it), and only warnings:
	// it reports every start at info level.
	glog := f.s.log.WithOptions(zap.IncreaseLevel(zap.WarnLevel)).Named("gnet").Sugar()
	opts := []gnet.Option{
		gnet.WithNumEventLoop(f.s.cfg.EventLoops),
		gnet.WithLogger(glog),
		gnet.WithTicker(true), // OnTick says when the loops are up
	}
	// acceptLoop waits for ln in Go's netpoller. An idle loop blocked in
	// epoll_wait keeps its P, and with one P per loop a new connection would
	// wait for sysmon to take the P back (10-20 ms) before anything accepts
	// it. The loops watch ln too, and park once when it becomes readable.
	// They watch a duplicate, closed only once the engine has stopped: ln's
	// own descriptor is closed first (close), and gnet could then give its
	// number to a connection still being enrolled.
	parkFD := dupFD(ln)
	if parkFD >= 0 {
		opts = append(opts, gnet.WithParkOnReadable(parkFD))
	}
	go func() {
		err := gnet.Run(f, "unix://"+filepath.Join(dir, "unused.sock"), opts...)
		// A failure to bind ends Run before OnBoot.
		select {
		case f.booted <- fmt.Errorf("resp: starting gnet: %w", errOrShutdown(err)):
		default:
		}
		if parkFD >= 0 {
			_ = syscall.Close(parkFD)
		}
		f.s.stopped(err)
		close(f.exited)
	}()
	err = <-f.booted
	_ = os.RemoveAll(dir)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	f.ln = ln
	go func() {
		defer close(f.accepted)
		f.s.acceptLoop(ln, f.admit)
	}()
	return ln.Addr(), nil
}

// dupFD duplicates ln's descriptor (close-on-exec), or returns -1.
func dupFD(ln net.Listener) int {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	dup := -1
	if err := rc.Control(func(fd uintptr) {
		if d, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0); e == 0 {
			dup = int(d)
		}
	}); err != nil {
		return -1
	}
	return dup
}

// maxEnrolling bounds the connections being handed to event loops at once:
// each holds a second descriptor until gnet has its duplicate registered.
const maxEnrolling = 16

// enrolled marks, as their gnet context, the connections acceptLoop hands
// over: OnOpen refuses any other.
type enrolled struct{}

// admit hands nc to an event loop, or refuses it past MaxClients.
func (f *gnetFrontend) admit(nc net.Conn) {
	s := f.s
	s.tcpOptions(nc)
	if !s.reserveClient() {
		s.refuse(nc)
		return
	}
	f.enrolling <- struct{}{}
	ch, err := f.eng.Register(gnet.NewContext(gnet.NewNetConnContext(context.Background(), nc), enrolled{}))
	if err != nil {
		<-f.enrolling
		s.clients.Add(-1)
		_ = nc.Close()
		return
	}
	go func() {
		r := <-ch
		<-f.enrolling
		if r.Err != nil {
			// gnet closed nc; OnOpen never ran, so OnClose does not count.
			s.clients.Add(-1)
			s.log.Debug("handing a connection to an event loop failed", zap.Error(r.Err))
		}
	}()
}

func errOrShutdown(err error) error {
	if err == nil {
		return errors.New("engine stopped")
	}
	return err
}

// OnBoot learns the engine; it is not running yet.
func (f *gnetFrontend) OnBoot(eng gnet.Engine) gnet.Action {
	f.eng = eng
	return gnet.None
}

// OnTick says the engine runs: gnet starts its ticker after it has set up
// the event loops, and Engine.Register hands connections to them. It then
// ticks once an hour, for nothing.
func (f *gnetFrontend) OnTick() (time.Duration, gnet.Action) {
	f.startOnce.Do(func() { f.booted <- nil })
	return time.Hour, gnet.None
}

// close stops the engine, which closes every connection (OnClose), and
// waits until it has.
func (f *gnetFrontend) close() error {
	_ = f.ln.Close()
	<-f.accepted
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

// OnOpen makes an admitted connection a client of its loop: admit has
// counted it against MaxClients already.
func (f *gnetFrontend) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	if _, ok := c.Context().(enrolled); !ok {
		return nil, gnet.Close // not from acceptLoop: gnet's own unused socket
	}
	lc := f.s.makeLoopConn(func() { f.wake(c) }, f.bell(c))
	lc.io = c
	c.SetContext(lc)
	f.s.register(lc.st.conn, addrString(c.RemoteAddr()), addrString(c.LocalAddr()), func() { f.kill(c) })
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
	if !ok {
		return gnet.Close
	}
	b := lc.bell
	b.busy.Store(true)
	closing := f.s.onTraffic(lc, c)
	f.s.serveWoken(b, nil)
	b.busy.Store(false)
	f.s.serveWoken(b, nil) // woken since the last look, by wakeConn's that saw busy set
	if closing {
		return gnet.Close
	}
	return gnet.None
}
