//go:build verbs

package ibv

/*
#cgo LDFLAGS: -libverbs
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"unsafe"
)

// Available reports whether this build can reach RDMA devices at all.
const Available = true

func errText(b []C.char) string { return C.GoString(&b[0]) }

// Devices lists the RDMA devices libibverbs sees.
func Devices() ([]string, error) {
	var buf [1024]C.char
	n := C.sl_device_names(&buf[0], C.int(len(buf)))
	if n < 0 {
		return nil, fmt.Errorf("ibv_get_device_list: %w", syscall.Errno(-n))
	}
	return strings.Fields(C.GoString(&buf[0])), nil
}

// Device is an open RDMA device: its context, one protection domain, and
// one completion queue with its completion channel, which every queue pair
// created on it shares. One goroutine polls it (Poll).
type Device struct {
	d    *C.sl_dev
	caps Caps
}

// Open opens the device name ("" for the first one) on port (0 for 1),
// using GID index gid (-1 to pick an IPv4-mapped RoCE v2 GID), with room
// for cqe completions.
func Open(name string, port, gid, cqe int) (*Device, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var errb [256]C.char
	var d *C.sl_dev
	if C.sl_open(cs, C.int(port), C.int(gid), C.int(cqe), &d, &errb[0], C.int(len(errb))) != 0 {
		C.sl_close(d)
		return nil, errors.New(errText(errb[:]))
	}
	dev := &Device{d: d}
	dev.caps = Caps{
		Name:             C.GoString(&d.name[0]),
		Driver:           C.GoString(&d.driver[0]),
		FirmwareVersion:  C.GoString(&d.fw_ver[0]),
		VendorID:         uint32(d.vendor_id),
		VendorPartID:     uint32(d.vendor_part_id),
		Port:             int(d.port),
		GIDIndex:         int(d.gid_index),
		MTU:              mtuBytes(int(d.active_mtu)),
		Atomic:           AtomicCap(d.atomic_cap),
		MaxQPRdAtom:      int(d.max_qp_rd_atom),
		MaxQPWR:          int(d.max_qp_wr),
		MaxCQE:           int(d.max_cqe),
		MaxMRSize:        uint64(d.max_mr_size),
		DeviceCapFlagsEx: uint64(d.device_cap_flags_ex),
	}
	copy(dev.caps.GID[:], C.GoBytes(unsafe.Pointer(&d.gid[0]), 16))
	return dev, nil
}

func mtuBytes(m int) int {
	if m < 1 || m > 5 {
		return 0
	}
	return 128 << m // IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5
}

// Caps is what the device says about itself.
func (d *Device) Caps() Caps { return d.caps }

// Close destroys the completion queue and the protection domain and closes
// the device. Every queue pair and memory region on it must be gone.
func (d *Device) Close() {
	C.sl_close(d.d)
	d.d = nil
}

// MR is a registered memory region.
type MR struct {
	mr         *C.struct_ibv_mr
	Addr       uintptr
	Len        int
	LKey, RKey uint32
}

// Register registers mem, which must not be Go heap memory (Mmap gives
// suitable memory), with the given access rights.
func (d *Device) Register(mem []byte, access Access) (*MR, error) {
	if len(mem) == 0 {
		return nil, errors.New("ibv: registering an empty region")
	}
	var errb [256]C.char
	p := unsafe.Pointer(unsafe.SliceData(mem))
	mr := C.sl_reg_mr(d.d, p, C.size_t(len(mem)), C.int(access), &errb[0], C.int(len(errb)))
	if mr == nil {
		return nil, errors.New(errText(errb[:]))
	}
	return &MR{mr: mr, Addr: uintptr(p), Len: len(mem), LKey: uint32(C.sl_mr_lkey(mr)), RKey: uint32(C.sl_mr_rkey(mr))}, nil
}

// Deregister releases the region; remote keys to it stop working.
func (m *MR) Deregister() error {
	if r := C.sl_dereg_mr(m.mr); r != 0 {
		return fmt.Errorf("ibv_dereg_mr: %w", syscall.Errno(r))
	}
	return nil
}

// QP is a reliable-connection queue pair.
type QP struct {
	qp        *C.struct_ibv_qp
	dev       *Device
	Num       uint32
	MaxInline int
}

// CreateQP creates an RC queue pair on the device's completion queue.
func (d *Device) CreateQP(maxSend, maxRecv, maxInline int) (*QP, error) {
	var errb [256]C.char
	var num, inl C.uint32_t
	qp := C.sl_qp_create(d.d, C.int(maxSend), C.int(maxRecv), C.int(maxInline), &num, &inl, &errb[0], C.int(len(errb)))
	if qp == nil {
		return nil, errors.New(errText(errb[:]))
	}
	return &QP{qp: qp, dev: d, Num: uint32(num), MaxInline: int(inl)}, nil
}

// ConnParams are the transport settings of a connection.
type ConnParams struct {
	// Access is what the remote side may do through this queue pair
	// (remote read, write, atomic), on top of the memory regions' own.
	Access Access
	// Timeout is the local ACK timeout exponent (4.096 µs × 2^Timeout);
	// Retry the transport retries; RNRRetry the receiver-not-ready
	// retries (7: for ever).
	Timeout, Retry, RNRRetry int
	// RdAtomic is the number of READs and atomics in flight each way.
	RdAtomic int
}

// Connect moves the queue pair through INIT and RTR to RTS, connected to
// the remote queue pair num at gid, whose first packet sequence number is
// rpsn; lpsn is this side's.
func (q *QP) Connect(num, rpsn, lpsn uint32, gid [16]byte, p ConnParams) error {
	var errb [256]C.char
	if C.sl_qp_connect(q.dev.d, q.qp, C.uint32_t(num), C.uint32_t(rpsn), C.uint32_t(lpsn),
		(*C.uint8_t)(unsafe.Pointer(&gid[0])), C.int(p.Access), C.int(p.Timeout), C.int(p.Retry),
		C.int(p.RNRRetry), C.int(p.RdAtomic), &errb[0], C.int(len(errb))) != 0 {
		return errors.New(errText(errb[:]))
	}
	return nil
}

// Fail moves the queue pair to the error state: every posted work request
// completes with a flush error and the peer's requests are dropped, which is
// how access is revoked.
func (q *QP) Fail() error {
	if r := C.sl_qp_to_error(q.qp); r != 0 {
		return fmt.Errorf("modify QP %d to ERR: %w", q.Num, syscall.Errno(r))
	}
	return nil
}

// State is the queue pair's state (IBV_QPS_*: 3 RTS, 6 ERR).
func (q *QP) State() (int, error) {
	r := int(C.sl_qp_state(q.qp))
	if r < 0 {
		return 0, fmt.Errorf("ibv_query_qp: %w", syscall.Errno(-r))
	}
	return r, nil
}

// Destroy destroys the queue pair.
func (q *QP) Destroy() error {
	if r := C.sl_qp_destroy(q.qp); r != 0 {
		return fmt.Errorf("ibv_destroy_qp %d: %w", q.Num, syscall.Errno(r))
	}
	return nil
}

// WR is one work request. Its layout is the C shim's sl_wr.
type WR struct {
	ID               uint64
	LocalAddr        uint64
	RemoteAddr       uint64
	CompareAdd, Swap uint64
	LocalLen, LKey   uint32
	RKey             uint32
	Opcode           Opcode
	Flags            SendFlags
	Imm              uint32
}

var _ [unsafe.Sizeof(WR{}) - unsafe.Sizeof(C.sl_wr{})]struct{}
var _ [unsafe.Sizeof(C.sl_wr{}) - unsafe.Sizeof(WR{})]struct{}

// PostSend posts wrs as one chain: one doorbell.
func (q *QP) PostSend(wrs []WR) error {
	if len(wrs) == 0 {
		return nil
	}
	if r := C.sl_post_send(q.qp, (*C.sl_wr)(unsafe.Pointer(&wrs[0])), C.int(len(wrs))); r != 0 {
		return fmt.Errorf("ibv_post_send on QP %d: %w", q.Num, syscall.Errno(r))
	}
	return nil
}

// PostRecv posts one receive buffer of n bytes at addr (in a region
// registered with lkey).
func (q *QP) PostRecv(id uint64, addr uintptr, n int, lkey uint32) error {
	if r := C.sl_post_recv(q.qp, C.uint64_t(id), C.uint64_t(addr), C.uint32_t(n), C.uint32_t(lkey)); r != 0 {
		return fmt.Errorf("ibv_post_recv on QP %d: %w", q.Num, syscall.Errno(r))
	}
	return nil
}

// WC is one completion. Its layout is the C shim's sl_wc.
type WC struct {
	ID        uint64
	Status    Status
	Opcode    WCOpcode
	ByteLen   uint32
	QPNum     uint32
	VendorErr uint32
	Flags     uint32
}

var _ [unsafe.Sizeof(WC{}) - unsafe.Sizeof(C.sl_wc{})]struct{}
var _ [unsafe.Sizeof(C.sl_wc{}) - unsafe.Sizeof(WC{})]struct{}

// Poll fills out with completions, waiting up to timeoutMs for the first
// on the completion channel (no busy polling). It returns 0 on a timeout.
// Only one goroutine may poll a device.
func (d *Device) Poll(out []WC, timeoutMs int) (int, error) {
	n := C.sl_poll(d.d, (*C.sl_wc)(unsafe.Pointer(&out[0])), C.int(len(out)), C.int(timeoutMs))
	if n < 0 {
		return 0, fmt.Errorf("polling the completion queue: %w", syscall.Errno(-n))
	}
	return int(n), nil
}

// PollNow fills out with the completions the queue holds, without waiting:
// the step of a busy poll, which costs no system call (the completion
// channel's wake-up does, and under emulation takes milliseconds).
func (d *Device) PollNow(out []WC) (int, error) {
	n := C.sl_poll_now(d.d, (*C.sl_wc)(unsafe.Pointer(&out[0])), C.int(len(out)))
	if n < 0 {
		return 0, fmt.Errorf("polling the completion queue: %w", syscall.Errno(-n))
	}
	return int(n), nil
}

// String names a completion status as libibverbs does.
func (s Status) String() string { return C.GoString(C.sl_wc_status_str(C.int(s))) }
