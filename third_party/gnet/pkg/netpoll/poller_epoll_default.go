// Copyright (c) 2019 Andy Pan
// Copyright (c) 2017 Joshua J Baker
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

//go:build linux && !poll_opt

package netpoll

import (
	"errors"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	errorx "github.com/panjf2000/gnet/v2/pkg/errors"
	"github.com/panjf2000/gnet/v2/pkg/logging"
	"github.com/panjf2000/gnet/v2/pkg/queue"
)

// Poller represents a poller which is in charge of monitoring file-descriptors.
type Poller struct {
	fd                          int    // epoll fd
	efd                         int    // eventfd
	efdBuf                      []byte // efd buffer to read an 8-byte integer
	wakeupCall                  int32
	asyncTaskQueue              queue.AsyncTaskQueue // queue with low priority
	urgentAsyncTaskQueue        queue.AsyncTaskQueue // queue with high priority
	highPriorityEventsThreshold int32                // threshold of high-priority events
	file                        *os.File             // a duplicate of fd in Go's netpoller (park)
	parkFDs                     []int                // descriptors whose readiness makes the next idle wait park (AddParkOnReadable)
	parkNext                    bool                 // one of parkFDs fired: park at the next idle wait
	raw                         syscall.RawConn
}

// OpenPoller instantiates a poller.
func OpenPoller() (poller *Poller, err error) {
	poller = new(Poller)
	if poller.fd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		poller = nil
		err = os.NewSyscallError("epoll_create1", err)
		return
	}
	if poller.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		_ = poller.Close()
		poller = nil
		err = os.NewSyscallError("eventfd", err)
		return
	}
	poller.efdBuf = make([]byte, 8)
	if err = poller.AddRead(&PollAttachment{FD: poller.efd}, true); err != nil {
		_ = poller.Close()
		poller = nil
		return
	}
	poller.asyncTaskQueue = queue.NewLockFreeQueue()
	poller.urgentAsyncTaskQueue = queue.NewLockFreeQueue()
	poller.highPriorityEventsThreshold = MaxPollEventsCap
	return
}

// Close closes the poller.
func (p *Poller) Close() error {
	if p.file != nil {
		_ = p.file.Close()
	}
	_ = unix.Close(p.efd)
	return os.NewSyscallError("close", unix.Close(p.fd))
}

// Make the endianness of bytes compatible with more linux OSs under different processor-architectures,
// according to http://man7.org/linux/man-pages/man2/eventfd.2.html.
var (
	u uint64 = 1
	b        = (*(*[8]byte)(unsafe.Pointer(&u)))[:]
)

// Trigger enqueues task and wakes up the poller to process pending tasks.
// By default, any incoming task will enqueued into urgentAsyncTaskQueue
// before the threshold of high-priority events is reached. When it happens,
// any asks other than high-priority tasks will be shunted to asyncTaskQueue.
//
// Note that asyncTaskQueue is a queue of low-priority whose size may grow large and tasks in it may backlog.
func (p *Poller) Trigger(priority queue.EventPriority, fn queue.Func, param any) (err error) {
	task := queue.GetTask()
	task.Exec, task.Param = fn, param
	if priority > queue.HighPriority && p.urgentAsyncTaskQueue.Length() >= p.highPriorityEventsThreshold {
		p.asyncTaskQueue.Enqueue(task)
	} else {
		// There might be some low-priority tasks overflowing into urgentAsyncTaskQueue in a flash,
		// but that's tolerable because it ought to be a rare case.
		p.urgentAsyncTaskQueue.Enqueue(task)
	}
	if atomic.CompareAndSwapInt32(&p.wakeupCall, 0, 1) {
		for {
			_, err = unix.Write(p.efd, b)
			if err == unix.EAGAIN {
				_, _ = unix.Read(p.efd, p.efdBuf)
				continue
			}
			break
		}
	}
	return os.NewSyscallError("write", err)
}

// Polling blocks the current goroutine, monitoring the registered file descriptors and waiting for network I/O.
// When I/O occurs on any of the file descriptors, the provided callback function is invoked.
func (p *Poller) Polling(callback PollEventHandler) error {
	el := newEventList(InitPollEventsCap)
	var doChores bool

	msec := -1
	for {
		var n int
		var err error
		if msec < 0 && p.parkNext {
			p.parkNext = false
			n, err = p.park(el.events)
		} else if msec < 0 && IdleWait != nil {
			switch w := IdleWait(); {
			case w == WaitPark:
				n, err = p.park(el.events)
			case w >= 0:
				// Goroutines this loop readied are on its P's run queue; the
				// Gosched below after an empty poll can pick the loop again
				// (the scheduler takes the global queue first one time in 61),
				// so yield once more before the system call keeps the P.
				runtime.Gosched()
				n, err = unix.EpollWait(p.fd, el.events, w)
			default:
				n, err = unix.EpollWait(p.fd, el.events, -1)
			}
		} else {
			n, err = unix.EpollWait(p.fd, el.events, msec)
		}
		if n == 0 || (n < 0 && err == unix.EINTR) {
			msec = -1
			runtime.Gosched()
			continue
		} else if err != nil {
			logging.Errorf("error occurs in epoll: %v", os.NewSyscallError("epoll_wait", err))
			return err
		}
		msec = 0

		for i := 0; i < n; i++ {
			ev := &el.events[i]
			if fd := int(ev.Fd); fd == p.efd { // poller is awakened to run tasks in queues.
				doChores = true
			} else if p.parkOn(fd) {
				p.parkNext = true
			} else {
				err = callback(fd, ev.Events, 0)
				if errors.Is(err, errorx.ErrAcceptSocket) || errors.Is(err, errorx.ErrEngineShutdown) {
					return err
				}
			}
		}

		if doChores {
			doChores = false
			task := p.urgentAsyncTaskQueue.Dequeue()
			for ; task != nil; task = p.urgentAsyncTaskQueue.Dequeue() {
				err = task.Exec(task.Param)
				if errors.Is(err, errorx.ErrEngineShutdown) {
					return err
				}
				queue.PutTask(task)
			}
			for i := 0; i < MaxAsyncTasksAtOneTime; i++ {
				if task = p.asyncTaskQueue.Dequeue(); task == nil {
					break
				}
				err = task.Exec(task.Param)
				if errors.Is(err, errorx.ErrEngineShutdown) {
					return err
				}
				queue.PutTask(task)
			}
			atomic.StoreInt32(&p.wakeupCall, 0)
			if (!p.asyncTaskQueue.IsEmpty() || !p.urgentAsyncTaskQueue.IsEmpty()) && atomic.CompareAndSwapInt32(&p.wakeupCall, 0, 1) {
				for {
					_, err = unix.Write(p.efd, b)
					if err == unix.EAGAIN {
						_, _ = unix.Read(p.efd, p.efdBuf)
						continue
					}
					if err != nil {
						logging.Errorf("failed to notify next round of event-loop for leftover tasks, %v", os.NewSyscallError("write", err))
					}
					break
				}
			}
		}

		if n == el.size {
			el.expand()
		} else if n < el.size>>1 {
			el.shrink()
		}
	}
}

// AddReadWrite registers the given file descriptor with readable and writable events to the poller.
func (p *Poller) AddReadWrite(pa *PollAttachment, edgeTriggered bool) error {
	var ev uint32 = ReadWriteEvents
	if edgeTriggered {
		ev |= unix.EPOLLET | unix.EPOLLRDHUP
	}
	return os.NewSyscallError("epoll_ctl add",
		unix.EpollCtl(p.fd, unix.EPOLL_CTL_ADD, pa.FD, &unix.EpollEvent{Fd: int32(pa.FD), Events: ev}))
}

// AddRead registers the given file descriptor with readable event to the poller.
func (p *Poller) AddRead(pa *PollAttachment, edgeTriggered bool) error {
	var ev uint32 = ReadEvents
	if edgeTriggered {
		ev |= unix.EPOLLET | unix.EPOLLRDHUP
	}
	return os.NewSyscallError("epoll_ctl add",
		unix.EpollCtl(p.fd, unix.EPOLL_CTL_ADD, pa.FD, &unix.EpollEvent{Fd: int32(pa.FD), Events: ev}))
}

// AddWrite registers the given file descriptor with writable event to the poller.
func (p *Poller) AddWrite(pa *PollAttachment, edgeTriggered bool) error {
	var ev uint32 = WriteEvents
	if edgeTriggered {
		ev |= unix.EPOLLET | unix.EPOLLRDHUP
	}
	return os.NewSyscallError("epoll_ctl add",
		unix.EpollCtl(p.fd, unix.EPOLL_CTL_ADD, pa.FD, &unix.EpollEvent{Fd: int32(pa.FD), Events: ev}))
}

// ModRead modifies the given file descriptor with readable event in the poller.
func (p *Poller) ModRead(pa *PollAttachment, edgeTriggered bool) error {
	var ev uint32 = ReadEvents
	if edgeTriggered {
		ev |= unix.EPOLLET | unix.EPOLLRDHUP
	}
	return os.NewSyscallError("epoll_ctl mod",
		unix.EpollCtl(p.fd, unix.EPOLL_CTL_MOD, pa.FD, &unix.EpollEvent{Fd: int32(pa.FD), Events: ev}))
}

// ModReadWrite modifies the given file descriptor with readable and writable events in the poller.
func (p *Poller) ModReadWrite(pa *PollAttachment, edgeTriggered bool) error {
	var ev uint32 = ReadWriteEvents
	if edgeTriggered {
		ev |= unix.EPOLLET | unix.EPOLLRDHUP
	}
	return os.NewSyscallError("epoll_ctl mod",
		unix.EpollCtl(p.fd, unix.EPOLL_CTL_MOD, pa.FD, &unix.EpollEvent{Fd: int32(pa.FD), Events: ev}))
}

// Delete removes the given file descriptor from the poller.
func (p *Poller) Delete(fd int) error {
	return os.NewSyscallError("epoll_ctl del", unix.EpollCtl(p.fd, unix.EPOLL_CTL_DEL, fd, nil))
}

// IdleWait, if set, chooses how an idle event loop waits for its next
// events (shiftlock-proxy's patch; third_party/gnet/PATCHED.md). It
// returns WaitBlock to block in epoll_wait(-1) as upstream does, WaitPark
// to wait parked in Go's netpoller (park), or a timeout in milliseconds to
// block in epoll_wait that long at most. A goroutine blocked in epoll_wait
// keeps its P; parking gives the P up, at the cost of a trip through Go's
// netpoller on every wake-up. The embedding application sets it once,
// before it starts an engine; it is called on the loop's goroutine before
// every blocking wait and must be cheap.
var IdleWait func() int

// The waits IdleWait chooses between, besides a timeout.
const (
	WaitBlock = -1
	WaitPark  = -2
)

// park waits for events like EpollWait(p.fd, events, -1), but parked in the
// Go scheduler rather than blocked in the system call (shiftlock-proxy's
// patch; third_party/gnet/PATCHED.md). A goroutine blocked in epoll_wait
// keeps its P: with GOMAXPROCS(1) every other goroutine, including those
// that Go's own netpoller would wake, then waits until sysmon takes the P
// back, 10-20 ms once it has backed off. The epoll fd is itself pollable,
// so it is watched by Go's netpoller instead: the loop's goroutine parks,
// the P runs whatever else is runnable, and an idle P blocks in Go's
// netpoller, which wakes for this loop's sockets and eventfd too.
func (p *Poller) park(events []unix.EpollEvent) (int, error) {
	if p.file == nil {
		if err := p.openFile(); err != nil {
			return unix.EpollWait(p.fd, events, -1)
		}
	}
	var n int
	var err error
	rerr := p.raw.Read(func(uintptr) bool {
		n, err = unix.EpollWait(p.fd, events, 0)
		return n != 0 || (err != nil && err != unix.EINTR)
	})
	if rerr != nil {
		// The file was closed under us (the poller is shutting down):
		// block as upstream does, on a poller that is going away.
		return unix.EpollWait(p.fd, events, -1)
	}
	return n, err
}

// AddParkOnReadable watches fd, edge-triggered, for the next wait of an
// idle loop only: when it becomes readable, the loop parks in Go's
// netpoller once instead of blocking in epoll_wait (shiftlock-proxy's
// patch; third_party/gnet/PATCHED.md). It is for descriptors that
// goroutines of the process wait on through Go's netpoller, such as a
// listener whose accept loop is a goroutine: while the loop blocks in the
// system call it keeps its P, and with one P per loop nobody polls Go's
// netpoller for them until sysmon takes the P back, 10-20 ms. Parking
// hands the P to the scheduler, which polls Go's netpoller and runs them.
// The loop never reads fd. Call it before the loop runs; fd must stay open
// as long as the poller.
func (p *Poller) AddParkOnReadable(fd int) error {
	if err := unix.EpollCtl(p.fd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Fd: int32(fd), Events: unix.EPOLLIN | unix.EPOLLET}); err != nil {
		return os.NewSyscallError("epoll_ctl add", err)
	}
	p.parkFDs = append(p.parkFDs, fd)
	return nil
}

func (p *Poller) parkOn(fd int) bool {
	for _, f := range p.parkFDs {
		if f == fd {
			return true
		}
	}
	return false
}

// openFile registers a duplicate of the epoll fd with Go's netpoller.
func (p *Poller) openFile() error {
	dup, err := unix.FcntlInt(uintptr(p.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		_ = unix.Close(dup)
		return err
	}
	f := os.NewFile(uintptr(dup), "gnet-epoll")
	raw, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return err
	}
	p.file, p.raw = f, raw
	return nil
}
