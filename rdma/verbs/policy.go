package verbs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/shiftlock/shiftlock-proxy/rdma"
)

// LockTableMode says how the lock table (and the range trees) are reached.
type LockTableMode uint8

const (
	// LockTableAuto picks the mode the device allows. One-sided ShiftLock
	// needs extended (masked, 16-byte) atomics, which standard libibverbs
	// cannot post and this package does not implement for any device
	// (docs/shiftlock.md, "A ConnectX (mlx5) user"), so auto is
	// LockTableCPU on every device, ConnectX included.
	LockTableAuto LockTableMode = iota
	// LockTableCPU: every verb on a lock-table or range-tree word is
	// executed by the memory node's CPU, requested with a two-sided SEND
	// and answered with one. This gives up one-sidedness for those words
	// only, and keeps every verb the rdma API has, masked 16-byte atomics
	// included, correct on a device with standard 8-byte atomics only.
	LockTableCPU
	// LockTableOneSided: the lock table is registered for one-sided READ,
	// WRITE, CAS and FAA; masked atomics on it are refused, and so is
	// memory-node recovery (its 16-byte reset is a CPU read-modify-write,
	// which a NIC's atomics are not atomic with). For locks that use only
	// standard 8-byte verbs: the CAS and DSLR baselines.
	LockTableOneSided
)

func (m LockTableMode) String() string {
	switch m {
	case LockTableAuto:
		return "auto"
	case LockTableCPU:
		return "cpu"
	case LockTableOneSided:
		return "one-sided"
	}
	return fmt.Sprintf("lock-table-mode(%d)", uint8(m))
}

// ParseLockTableMode reads a mode as the command lines spell it.
func ParseLockTableMode(s string) (LockTableMode, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return LockTableAuto, nil
	case "cpu":
		return LockTableCPU, nil
	case "one-sided", "onesided":
		return LockTableOneSided, nil
	}
	return 0, fmt.Errorf("verbs: unknown lock-table mode %q (auto, cpu or one-sided)", s)
}

// Plan is how each region of a memory node is reached in mode (auto
// already resolved). The rules, which docs/shiftlock.md ("The verbs fabric")
// argues:
//
//   - A region whose words take masked atomics, or read-modify-writes by
//     the memory node's own CPU that clients' atomics could interleave
//     with, is CPU: the lock table (unless one-sided) and the range trees.
//   - The era counters are one-sided and read-only: clients only read
//     them; the memory node's CPU bumps them during recovery.
//   - The node table is one-sided, read and write: members write their
//     heartbeat and horizon words and read their status words; the
//     memory node's CPU reads the former and writes the latter. Nobody
//     performs a read-modify-write on it.
func Plan(mode LockTableMode, regions []rdma.RegionInfo) []RegionMap {
	var ms []RegionMap
	for _, r := range regions {
		m := RegionMap{ID: r.ID, Size: r.Size, Mech: CPU}
		switch r.ID {
		case rdma.RegionLocks:
			if mode == LockTableOneSided {
				m.Mech, m.Rights = OneSided, RightRead|RightWrite|RightAtomic
			}
		case rdma.RegionEras:
			m.Mech, m.Rights = OneSided, RightRead
		case rdma.RegionNodes:
			m.Mech, m.Rights = OneSided, RightRead|RightWrite
		}
		ms = append(ms, m)
	}
	return ms
}

// checkOp validates op against its region as rdma.Memory does, so that a
// bad verb fails on its own, with the same error as on every other fabric,
// instead of reaching the device: a remote access error would break the
// queue pair and with it every verb of the endpoint.
func checkOp(op *rdma.Op, m *RegionMap) error {
	var n, align uint64
	switch op.Verb {
	case rdma.VerbRead, rdma.VerbWrite:
		if op.Wide {
			return fmt.Errorf("%w: the 16-byte flag is for atomics", rdma.ErrBadRequest)
		}
		n, align = uint64(len(op.Buf)), 8
	case rdma.VerbCAS, rdma.VerbFAA, rdma.VerbMaskedCAS, rdma.VerbMaskedFAA:
		n, align = 8, 8
		if op.Wide {
			n, align = 16, 16
		}
	default:
		return fmt.Errorf("%w: verb %v is not a memory verb", rdma.ErrBadRequest, op.Verb)
	}
	off := op.Addr.Offset
	if off%align != 0 || n%8 != 0 {
		return fmt.Errorf("%w: region %d offset %#x length %d (need %d-byte alignment)", rdma.ErrMisaligned, m.ID, off, n, align)
	}
	if off > m.Size || n > m.Size-off {
		return fmt.Errorf("%w: region %d offset %#x length %d size %d", rdma.ErrOutOfBounds, m.ID, off, n, m.Size)
	}
	if m.Mech == CPU {
		return nil
	}
	// One-sided: only what the region was registered for, and only the
	// verbs standard libibverbs has.
	switch op.Verb {
	case rdma.VerbRead:
		if m.Rights&RightRead == 0 {
			return fmt.Errorf("%w: region %d is not readable one-sided", rdma.ErrBadRequest, m.ID)
		}
	case rdma.VerbWrite:
		if m.Rights&RightWrite == 0 {
			return fmt.Errorf("%w: region %d is read-only to members", rdma.ErrBadRequest, m.ID)
		}
	default:
		if m.Rights&RightAtomic == 0 {
			return fmt.Errorf("%w: region %d takes no atomics from members", rdma.ErrBadRequest, m.ID)
		}
		if op.Wide || op.Verb == rdma.VerbMaskedCAS || op.Verb == rdma.VerbMaskedFAA {
			return fmt.Errorf("%w: %v on region %d: %w", rdma.ErrBadRequest, op.Verb, m.ID, ErrNoExtendedAtomics)
		}
	}
	return nil
}

// ErrNoExtendedAtomics is a masked or 16-byte atomic on a one-sided
// region: standard libibverbs has no such verb, and no device here has it.
var ErrNoExtendedAtomics = errors.New("masked and 16-byte atomics need extended atomics, which this device does not have (serve the region through the memory node's CPU: lock table mode cpu)")
