package ibv

import "fmt"

// Access is a set of IBV_ACCESS_* rights of a memory region or queue pair.
type Access int

const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
)

// Opcode is a work request's IBV_WR_* opcode.
type Opcode uint32

const (
	OpWrite        Opcode = 0
	OpWriteWithImm Opcode = 1
	OpSend         Opcode = 2
	OpSendWithImm  Opcode = 3
	OpRead         Opcode = 4
	OpCompareSwap  Opcode = 5
	OpFetchAdd     Opcode = 6
)

// SendFlags are a work request's IBV_SEND_* flags.
type SendFlags uint32

const (
	SendFence    SendFlags = 1 << 0
	SendSignaled SendFlags = 1 << 1
	SendInline   SendFlags = 1 << 3
)

// Status is a completion's IBV_WC_* status.
type Status uint32

const (
	StatusSuccess      Status = 0
	StatusLocLenErr    Status = 1
	StatusLocQPOpErr   Status = 2
	StatusLocProtErr   Status = 4
	StatusFlushErr     Status = 5
	StatusBadRespErr   Status = 7
	StatusLocAccessErr Status = 8
	StatusRemInvReqErr Status = 9
	StatusRemAccessErr Status = 10
	StatusRemOpErr     Status = 11
	StatusRetryExcErr  Status = 12
	StatusRNRRetryExc  Status = 13
	StatusRemAbortErr  Status = 16
	StatusFatalErr     Status = 19
	StatusRespTimeout  Status = 20
	StatusGeneralErr   Status = 21
)

// WCOpcode is a completion's IBV_WC_* opcode.
type WCOpcode uint32

const (
	WCSend        WCOpcode = 0
	WCWrite       WCOpcode = 1
	WCRead        WCOpcode = 2
	WCCompareSwap WCOpcode = 3
	WCFetchAdd    WCOpcode = 4
	WCRecv        WCOpcode = 1 << 7
	WCRecvImm     WCOpcode = WCRecv + 1
)

// AtomicCap is the device's IBV_ATOMIC_* guarantee for 8-byte atomics.
type AtomicCap int

const (
	// AtomicNone: no remote atomics.
	AtomicNone AtomicCap = 0
	// AtomicHCA: atomic with respect to other atomics through this
	// device only (not to the host CPU's own atomics).
	AtomicHCA AtomicCap = 1
	// AtomicGlob: atomic with respect to the host CPU too.
	AtomicGlob AtomicCap = 2
)

func (a AtomicCap) String() string {
	switch a {
	case AtomicNone:
		return "none"
	case AtomicHCA:
		return "hca"
	case AtomicGlob:
		return "global"
	}
	return fmt.Sprintf("atomic_cap(%d)", int(a))
}

// Caps is what a device reports about itself (ibv_query_device_ex,
// ibv_query_port) and the port and GID chosen.
type Caps struct {
	Name, Driver, FirmwareVersion string
	VendorID, VendorPartID        uint32
	Port, GIDIndex                int
	GID                           [16]byte
	// MTU is the port's active path MTU in bytes.
	MTU int
	// Atomic is the guarantee of the standard 8-byte atomics. Masked
	// (extended) and 16-byte atomics are not in standard libibverbs at
	// all: see rdma/verbs for how the project does without them.
	Atomic               AtomicCap
	MaxQPRdAtom, MaxQPWR int
	MaxCQE               int
	MaxMRSize            uint64
	DeviceCapFlagsEx     uint64
}

// IsRXE reports whether the device is the kernel's soft-RoCE (rdma_rxe),
// whose vendor ID is 0xffffff.
func (c Caps) IsRXE() bool { return c.VendorID == 0xffffff }

// IsMLX5 reports whether the device is an mlx5 ConnectX (vendor Mellanox,
// 0x02c9), the family with extended atomics.
func (c Caps) IsMLX5() bool {
	return c.VendorID == 0x02c9 && c.Driver != "" && len(c.Name) >= 4 && c.Name[:4] == "mlx5"
}
