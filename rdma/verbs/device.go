//go:build verbs

package verbs

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/shiftlock/shiftlock-proxy/rdma"
	"github.com/shiftlock/shiftlock-proxy/rdma/verbs/ibv"
)

// Work-request kinds, the top byte of every work request's id: they say
// which table the rest of the id indexes.
const (
	kOneSided uint8 = 1 // a chain of one-sided verbs; index = slot
	kCPUSend  uint8 = 2 // a CPU request's SEND; index = slot
	kCPURecv  uint8 = 3 // a CPU reply received; index = receive buffer
	kPeerSend uint8 = 4 // a SEND to a member; index = send buffer
	kPeerRecv uint8 = 5 // a Send or an ack received; index = receive buffer
	kSrvRecv  uint8 = 6 // memory node: a CPU request received; index = buffer
	kSrvSend  uint8 = 7 // memory node: a reply's SEND; index = reply buffer
	lastFlag        = 1 << 23
	indexMask       = 1<<23 - 1
	connShift       = 24
	kindShift       = 56
)

func wrID(kind uint8, conn uint32, idx int) uint64 {
	return uint64(kind)<<kindShift | uint64(conn)<<connShift | uint64(idx)&(1<<24-1)
}

func splitID(id uint64) (kind uint8, conn uint32, idx int) {
	return uint8(id >> kindShift), uint32(id >> connShift), int(id & (1<<24 - 1))
}

// sink receives the completions of one connection's work requests, on
// the device's poller, which must never block.
type sink interface {
	complete(kind uint8, idx int, wc *ibv.WC)
}

// failer is a sink that wants to hear that the device itself failed.
type failer interface {
	deviceFailed(err error)
}

// device is an open device and the goroutine that polls its completion
// queue and hands every completion to the connection it belongs to.
type device struct {
	dev *ibv.Device
	log *zap.Logger

	// mu is read-held while completions are delivered, so that
	// unregister returns only once the poller is done with the sink.
	mu    sync.RWMutex
	sinks map[uint32]sink
	next  uint32

	polls   atomic.Uint64 // completions handled, for tests
	started bool
	// active is when work was last posted or completed (monotonic ns
	// since epoch): the poller busy-polls, yielding, for spinFor after it.
	active atomic.Int64

	stop chan struct{}
	done chan struct{}
}

func openDevice(cfg DeviceConfig, cqe int, log *zap.Logger) (*device, error) {
	gid, err := cfg.gidIndex()
	if err != nil {
		return nil, err
	}
	d, err := ibv.Open(cfg.Device, cfg.Port, gid, cqe)
	if err != nil {
		return nil, fmt.Errorf("verbs: %w", err)
	}
	return &device{dev: d, log: log, sinks: map[uint32]sink{}, stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// The endpoints of a process share one open device per (device, port,
// GID): one context, one completion queue and one poller, so that a
// process busy-polls on one thread however many memory nodes (or, in
// tests, members) it has.
var shared struct {
	mu   sync.Mutex
	devs map[DeviceConfig]*sharedDevice
}

type sharedDevice struct {
	d    *device
	refs int
}

// acquireDevice returns the process's device for cfg, opening it (and
// starting its poller) on first use; release it when done.
func acquireDevice(cfg DeviceConfig, log *zap.Logger) (*device, func(), error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.devs == nil {
		shared.devs = map[DeviceConfig]*sharedDevice{}
	}
	sd := shared.devs[cfg]
	if sd == nil {
		d, err := openDevice(cfg, sharedCQE, log)
		if err != nil {
			return nil, nil, err
		}
		d.start()
		sd = &sharedDevice{d: d}
		shared.devs[cfg] = sd
	}
	sd.refs++
	var once sync.Once
	return sd.d, func() {
		once.Do(func() {
			shared.mu.Lock()
			sd.refs--
			last := sd.refs == 0
			if last {
				delete(shared.devs, cfg)
			}
			shared.mu.Unlock()
			if last {
				sd.d.close()
			}
		})
	}, nil
}

// sharedCQE is the completion queue of a shared device: room for every
// completion its endpoints can have outstanding (each at most its slots,
// its CPU reply buffers and two buffers' worth per member connection).
const sharedCQE = 32768

func (d *device) register(s sink) uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		d.next++
		if d.next == 0 || d.next >= 1<<32-1 {
			d.next = 1
		}
		if d.sinks[d.next] == nil {
			d.sinks[d.next] = s
			return d.next
		}
	}
}

// unregister stops deliveries to id and returns once none is under way:
// the caller may then destroy what the sink delivers into. It must not be
// called from the poller or with a lock a sink takes.
func (d *device) unregister(id uint32) {
	d.mu.Lock()
	delete(d.sinks, id)
	d.mu.Unlock()
}

// start runs the poller until halt.
func (d *device) start() {
	d.started = true
	go d.poll()
}

// spinFor is how long the poller busy-polls after the last sign of work
// before it sleeps on the completion channel. Sleeping costs a wake-up per
// completion, which in the emulated test guest takes milliseconds (6 ms a
// one-sided CAS, against under 1 ms busy-polled); a memory node or a proxy
// at work posts and completes far more often than that, so under load the
// poller never sleeps, and idle it spins 2 ms, yielding to other
// goroutines all along.
const spinFor = 2 * time.Millisecond

var epoch = time.Now()

func monoNow() int64 { return int64(time.Since(epoch)) }

// kick notes that work was posted: a completion is coming.
func (d *device) kick() { d.active.Store(monoNow()) }

func (d *device) poll() {
	defer close(d.done)
	var wcs [32]ibv.WC
	for {
		select {
		case <-d.stop:
			return
		default:
		}
		var n int
		var err error
		if monoNow()-d.active.Load() < int64(spinFor) {
			// Yield between polls: the goroutines the last completions
			// woke run on this P meanwhile.
			if n, err = d.dev.PollNow(wcs[:]); err == nil && n == 0 {
				runtime.Gosched()
				continue
			}
		} else {
			// The timeout only bounds how long close waits: a completion
			// wakes the poller through the completion channel.
			n, err = d.dev.Poll(wcs[:], 50)
		}
		if err != nil {
			d.log.Error("verbs: polling the completion queue failed; the device is unusable", zap.Error(err))
			err = fmt.Errorf("%w: %v", rdma.ErrUnreachable, err)
			d.mu.RLock()
			for _, s := range d.sinks {
				if f, ok := s.(failer); ok {
					f.deviceFailed(err)
				}
			}
			d.mu.RUnlock()
			<-d.stop
			return
		}
		d.mu.RLock()
		for i := 0; i < n; i++ {
			wc := &wcs[i]
			kind, conn, idx := splitID(wc.ID)
			if s := d.sinks[conn]; s != nil {
				s.complete(kind, idx, wc)
			}
			d.polls.Add(1)
		}
		d.mu.RUnlock()
		if n > 0 {
			d.kick()
			runtime.Gosched()
		}
	}
}

// halt stops the poller (if it ever started): no completion is handled
// after it returns.
func (d *device) halt() {
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	if d.started {
		<-d.done
	}
}

// close stops the poller and closes the device. Every queue pair and
// memory region on it must be gone.
func (d *device) close() {
	d.halt()
	d.dev.Close()
}

// qpMem is a queue pair and the memory its work requests use, registered
// for local access: what the memory node connection, a member connection
// and a memory node's member each set up, and tear down in reverse.
type qpMem struct {
	qp  *ibv.QP
	mem []byte
	mr  *ibv.MR
}

// newQPMem maps size bytes, registers them and creates a queue pair with
// room for maxSend and maxRecv work requests; on an error it leaves
// nothing behind.
func (d *device) newQPMem(size, maxSend, maxRecv int) (qpMem, error) {
	mem, err := ibv.Mmap(size)
	if err != nil {
		return qpMem{}, err
	}
	mr, err := d.dev.Register(mem, ibv.AccessLocalWrite)
	if err != nil {
		_ = ibv.Munmap(mem)
		return qpMem{}, err
	}
	qp, err := d.dev.CreateQP(maxSend, maxRecv, 0)
	if err != nil {
		_ = mr.Deregister()
		_ = ibv.Munmap(mem)
		return qpMem{}, err
	}
	return qpMem{qp: qp, mem: mem, mr: mr}, nil
}

// destroyQPMem destroys q's queue pair, then releases the memory it wrote.
// The zero qpMem has nothing to destroy. It is a function, not a method,
// so that the types embedding a qpMem get no destroy that would skip their
// own teardown (no deliveries first: device.unregister).
func destroyQPMem(q qpMem) {
	if q.qp == nil {
		return
	}
	_ = q.qp.Destroy()
	_ = q.mr.Deregister()
	_ = ibv.Munmap(q.mem)
}

// statusErr maps a failed completion to the fabric's errors, so that the
// layers above recover from a QP failure as they do from a lost TCP
// connection on tcpfab:
//
//   - the peer stopped answering (transport retries exhausted, or a flush
//     after the queue pair failed): ErrUnreachable;
//   - the receiver kept no buffer posted for the retries allowed: ErrNotReady;
//   - the remote side refused the access (revoked, bad key, bad address):
//     ErrUnreachable, since the queue pair is broken from then on;
//   - a local mistake (length, protection, operation): ErrBadRequest.
func statusErr(wc *ibv.WC) error {
	what := fmt.Sprintf("verbs: completion %v (vendor error %#x)", wc.Status, wc.VendorErr)
	switch wc.Status {
	case ibv.StatusRNRRetryExc:
		return fmt.Errorf("%w: %s", rdma.ErrNotReady, what)
	case ibv.StatusLocLenErr, ibv.StatusLocQPOpErr, ibv.StatusLocProtErr, ibv.StatusLocAccessErr:
		return fmt.Errorf("%w: %s", rdma.ErrBadRequest, what)
	default:
		return fmt.Errorf("%w: %s", rdma.ErrUnreachable, what)
	}
}

// errBroken is what every verb returns once the queue pair to the memory
// node has failed.
var errBroken = errors.New("verbs: the queue pair to the memory node failed")

// connParams are the transport settings of every queue pair: an ACK timeout
// of 4.096 µs × 2^18 (1.07 s) and 6 retries, so a peer that died is
// unreachable within about 7.5 s (7 retries would be for ever: rxe, like
// the RNR retry count of the spec, reads 7 as infinite). Shorter timeouts
// failed healthy queue pairs in the emulated test guest on a loaded host,
// and a queue pair that failed is gone for good; the death of a memory
// node is noticed at once anyway, by its TCP control connection. RNR
// retries for ever, since credits keep a receiver's buffers posted and a
// receiver that is merely slow must not fail a Send.
func connParams(access ibv.Access) ibv.ConnParams {
	return ibv.ConnParams{Access: access, Timeout: 18, Retry: 6, RNRRetry: 7, RdAtomic: 16}
}
